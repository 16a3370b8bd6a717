import sys

from token_resource.cli import main

sys.exit(main())
