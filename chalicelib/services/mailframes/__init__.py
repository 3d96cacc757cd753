"""Mail frames: showing a mail's HTML as a mail client would (its inline styles and
``<style>`` blocks applied) without letting it near the console's own page. An authorized
caller asks for a frame of some kind (``kinds.py``: a template rendered from given parts,
...); the HTML is built then, held in a row for a few minutes, and served by a public URL
carrying a signed id, with a Content-Security-Policy of its own (styles yes, scripts and
everything else no, sandboxed) into an ``<iframe sandbox>`` of the console
(console/assets/mailframe.js). Modules: ``frames.py`` (issue, serve, expire), ``kinds.py``
(what each kind shows and who may ask for it)."""
