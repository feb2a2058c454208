"""raydbg: debug and observe distributed training on Ray."""

from raydbg.activation import runtime_env

__version__ = "0.1.0"
__all__ = ["runtime_env", "__version__"]
