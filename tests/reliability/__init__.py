"""Reliability and security fault suite (issue 7): run alone with ``pytest -m reliability``."""
