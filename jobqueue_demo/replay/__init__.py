"""`replay`: a production deadlock report turned back into a lesson that reproduces it.

report.py (what a report says, engine-neutral), readers.py (the registry of report readers:
innodb.py, postgresql_log.py), schema.py (the tables a report's locks are on, read from
the user's CREATE statements), keys.py (an InnoDB record's fields as values), build.py (the
lesson's text for one schedule), search.py (the schedules tried on a server, and the one
that reproduced the report's cycle). docs/replay.md tells the whole.
"""
