"""jobqueue-demo: job-queue concurrency lessons run and verified on a real MySQL-family server."""

__version__ = "0.1.0"
