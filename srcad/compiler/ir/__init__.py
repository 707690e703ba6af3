"""The IR: node classes (`nodes`), traversals (`visit`) and text (`printer`)."""
from .nodes import *  # noqa: F401,F403
