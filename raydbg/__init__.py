"""raydbg."""
