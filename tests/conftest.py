"""Fixtures shared by every test package."""

# netns_hosts: fake hosts in real network namespaces (needs root; see tests/helpers/netns.py, hosts.py).
pytest_plugins = ["tests.helpers.netns", "tests.helpers.postgres", "tests.helpers.node_exporter"]
