"""The engine's one error type, in a module that imports nothing: the CLI catches it without
importing the loader (and polars) first."""


class TraceError(Exception):
    """A file that cannot be read as a trace. str() is one line naming the file and the problem."""
