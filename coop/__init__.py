"""coop: train NumPy-style models under a hard memory budget."""
from coop._core import CHEAP, EXPENSIVE, NO_STORAGE, POLICIES, Arena
from coop.errors import OutOfMemoryError

__all__ = ["Arena", "CHEAP", "EXPENSIVE", "NO_STORAGE", "POLICIES", "OutOfMemoryError"]
__version__ = "0.1.0"
