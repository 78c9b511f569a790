"""The newcomer's path: the README tour and the tutorial run in a brand-new project, crash_test's errors, make demo."""
