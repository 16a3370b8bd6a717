"""token-resource: serve Kubernetes extended resources ("tokens") from one TOML file."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("token-resource")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
