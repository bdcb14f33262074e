"""The Lucerna front end: supervision, scheduling and the HTTP API dialects."""
