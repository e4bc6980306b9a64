"""A MariaDB Galera cluster: MariaDB's engine (mysql/) plus what a run does across nodes.

Not in the registry: no DSN scheme names a cluster. Its engine (engine.py) is chosen by the
cluster's opener (cluster.py), and lessons key its per-engine parts as mysql's."""
