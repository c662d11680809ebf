"""``python -m rllib_integration.settings --markdown``: print docs/config_reference.md."""

import sys

from .reference import main

sys.exit(main())
