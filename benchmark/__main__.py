import sys

from benchmark.cli import main

sys.exit(main())
