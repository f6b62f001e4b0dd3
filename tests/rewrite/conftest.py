"""Make the shared helpers (rw_testing.py) importable under any import mode."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
