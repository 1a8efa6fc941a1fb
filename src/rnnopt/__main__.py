import sys

from rnnopt.cli import main

sys.exit(main())
