import sys

from raydbg.cli import main

sys.exit(main())
