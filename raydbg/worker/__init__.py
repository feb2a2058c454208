"""Worker side of raydbg: breakpoint and post-mortem take-over inside Ray workers."""
