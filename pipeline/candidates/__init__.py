"""2. Mask candidates: documents -> documents with spaCy entity / noun-phrase character spans.

In: :class:`~pipeline.elements.Document` s. Out (``FindMaskCandidates`` in ``mask_candidates.py``):
:class:`~pipeline.elements.AnnotatedDocument` s and the description of each spaCy model the workers used.
``spacy_spans.py`` is the pure part (load spaCy, annotate texts, cut long texts); only runs when
``--mask-candidates`` names entities or noun_phrases (n-gram candidates come from the segmenter in tokenize/).
"""
