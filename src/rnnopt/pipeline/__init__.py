"""The config: its check, defaults and expansion into the workflow's jobs."""
