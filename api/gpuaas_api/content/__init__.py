"""Artifact content addressed by sha256 (issue 8): the store, the per-digest install cache of collection
tarballs, and the upload/download routes."""
