"""preflight: validate a distributed PyTorch job from inside its own launcher, before it starts."""

__version__ = "0.1.0"
