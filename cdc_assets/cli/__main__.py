"""``python -m cdc_assets.cli``: the ``cdc-assets`` command line."""

import sys

from cdc_assets.cli import main

sys.exit(main())
