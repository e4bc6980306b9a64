INSERT INTO jobs (id, task) VALUES
  (1, 'resize avatar of user 7'),
  (2, 'resize avatar of user 7'),
  (3, 'send welcome email');
