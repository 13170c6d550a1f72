"""The chart's hook Jobs: certificate bootstrap and webhook unregistration on uninstall."""
