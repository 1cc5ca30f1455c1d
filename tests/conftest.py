"""Test-suite set-up: make tests/ importable so test files share tests/tiny_models.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
