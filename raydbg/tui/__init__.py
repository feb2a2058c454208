"""raydbg's terminal UI (`raydbg tui`, `raydbg attach`), built on Textual and raydbg.dap."""
