"""Certificates: making the serving bundle, and reloading it while serving."""
