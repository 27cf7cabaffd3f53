"""``python -m mrcnic.regmap [FILE]``: write the register documentation (stdout without FILE)."""

import sys

from .markdown import registers_markdown

text = registers_markdown()
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write(text)
else:
    sys.stdout.write(text)
