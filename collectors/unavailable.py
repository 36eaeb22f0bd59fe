"""The one exception a variant raises when it cannot run here (device, dtype or installation).

Its own module so that collectors.hub (which raises it) and collectors.variants (which loads the
hub's kernel inside a function) do not import each other.
"""


class Unavailable(Exception):
    """This device, dtype or installation cannot run the variant; str(exc) is the reason."""
