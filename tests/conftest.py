"""Fixtures shared by every test package."""

# netns_hosts: real network namespaces as fake hosts (needs root; see tests/helpers/netns.py).
pytest_plugins = ["tests.helpers.netns"]
