"""The data every stage passes on. Re-exported here: `from preflight.model import Finding`."""
from preflight.model._all import *  # noqa: F403
