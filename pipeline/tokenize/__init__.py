"""3. Tokenize: documents -> tokenized documents (WordPiece ids, word and sentence starts, candidate spans).

In: :class:`~pipeline.elements.Document` s or :class:`~pipeline.elements.AnnotatedDocument` s. Out
(``TokenizeDocuments`` in ``tokenized_documents.py``, its arrays in ``encodings.py``): :class:`~pipeline.elements.TokenizedDocument` s and
dead letters for texts that give no tokens. ``tokenizer.py`` loads or trains the WordPiece tokenizer,
``sentences.py`` splits sentences with Punkt.
"""
