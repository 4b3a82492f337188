"""Start Sluice without installing it: ``python gateways/sluice/run.py --config sluice.toml``."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sluice.main import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
