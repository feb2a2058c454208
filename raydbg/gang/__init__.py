"""Gangs: stacks, classes, progress, pause groups and hang detection of multi-process jobs."""
