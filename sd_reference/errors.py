"""The one exception type for mistakes a user can fix (bad path, bad flag, bad data).

The CLI prints it as a single line with no traceback; everything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input, reported as one line: what happened, what to do."""
