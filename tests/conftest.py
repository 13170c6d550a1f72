"""Test-wide settings: Hypothesis explores new examples on developers' runs and replays fixed ones in CI."""

import os

from hypothesis import settings

# CI must judge the submission, not the luck of the draw: a derandomized run is the same run every time.
# Developers' runs (no CI variable) keep drawing fresh examples, which is how fuzz bugs are found.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
