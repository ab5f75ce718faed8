"""Drop-in replacements for other libraries' APIs on top of regattn.

from regattn.compat import entmax as E   # instead of `import entmax as E`
"""

from . import entmax

__all__ = ["entmax"]
