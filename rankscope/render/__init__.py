"""Renderers: tables and findings -> HTML, timelines, exports, terminal. One renderer, one file."""
