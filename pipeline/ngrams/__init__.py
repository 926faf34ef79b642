"""N-gram counting over WikiText files: the stages of ``pipeline.build_ngram_dictionary``.

What flows in: file paths (WikiText, possibly compressed) and the counting rules (:class:`rules.NgramRules`).
What flows out: ``ngram_to_count`` of the n-grams that pass the threshold, what the input was made of, where it
came from, dead letters for lines that are not UTF-8, and the dictionary directory written from them
(``schemas/NGRAM_DICTIONARY.md``). One composite ``PTransform`` per module, named after what it produces, in
the order the job runs them: ``lines`` (ReadLines) -> ``source_files`` (SourceFiles), ``corpus_summary``
(CorpusSummary) -> ``frequent_words`` (FrequentWords) -> ``frequent_pairs`` (FrequentPairs) ->
``frequent_longer_ngrams`` (FrequentLongerNgrams) -> ``decoded_ngrams`` (DecodeNgrams), all wrapped by
``frequent_ngrams`` (FrequentNgrams; ``counted_ngrams`` for ``pruning="none"``) -> ``dictionary_files``
(WriteNgramDictionary). ``frequent_tables`` (MergePartialCounts) is the merge step the counting stages share;
``rules`` and ``codes`` are the pure libraries beneath them. Importing the package has no side effects.

The rules (also stated in ``dictionaries/README.md``):

- A WikiText line is a heading (``heading_level(line) > 0``: ``" = Title = "``, ``" = = Section = = "``, ...),
  blank, or a paragraph. Heading lines and blank lines never count: neither their words nor the ``=`` markup.
  (A ``=`` inside a paragraph line, e.g. ``" C = O "`` or the table leftover ``" = National record "``, is an
  ordinary symbol token.)
- A paragraph's tokens are ``line.split()`` (WikiText separates tokens with single spaces). ``<unk>`` is a
  barrier: n-grams never contain it and never span it. With ``drop_punctuation``, punctuation tokens are
  barriers too, which is exactly "drop every n-gram that contains a punctuation token".
- ``lowercase`` lowercases the tokens before counting (``<unk>`` is recognised before lowercasing).
- Punctuation token (:func:`is_punctuation`): WikiText's ``@-@``, ``@,@``, ``@.@`` markers, or a token all of
  whose characters are in a Unicode punctuation (P*) or symbol (S*) category: ``, . " ( ) ; : ' – — / % $ =
  ... ° £ +`` are punctuation; ``1.5``, ``U.S.``, ``½`` (a number, No) and ``'s`` are not.
- N-grams are the token sequences of length ``min_n..max_n`` inside one barrier-free run of one line, written
  as their tokens joined by a single space. Their count is the number of positions they occur at.

How counting scales (the stages below):

1. Pre-aggregation with bounded memory: every counting DoFn keeps the partial counts of its bundle and flushes
   them whenever they hold ``max_keys_per_bundle`` keys; the partial counts are shuffled in ``SHARDS`` key
   ranges, packed (one element per shard and flush, not one per n-gram), and merged per shard
   (:class:`MergePartialCounts`), which applies the threshold.
2. Apriori pruning (``pruning="apriori"``, the default): an n-gram occurring ``c`` times contains each of its
   two (n-1)-grams at those ``c`` positions, so it can reach ``min_count`` only if both (n-1)-grams did. So the
   words are counted first, then each length n = 2..max_n, only at positions whose two (n-1)-grams are
   frequent. The counts of the n-grams that survive are exact; only hopeless n-grams are never counted. This
   shrinks what is shuffled from every distinct n-gram of the corpus (hundreds of millions on WikiText-103,
   mostly seen once) to the candidates (WikiText-2: 1.09 M distinct 2..5-grams, 0.31 M candidates, 5,077 kept).
3. Numbers, not strings: the frequent words get ids (their rank in sorted order), each frequent k-gram an id
   (the rank of its code), and a (k+1)-gram the exact code ``(id of its first k words) << 32 | (id of its last
   word)``; every worker ranks the same side input, so codes agree across workers. The input is read twice:
   once to count words (:class:`FrequentWords`, sharing its read with the corpus summary), once to turn every
   line into word ids (-1 for infrequent words and between runs) while counting pairs (:class:`FrequentPairs`).
   Longer lengths (:class:`FrequentLongerNgrams`) work on those id chunks with numpy alone: look the k-gram
   codes up in the sorted codes of the frequent k-grams (``searchsorted``) for k = 2..n-1, count the codes of
   the length-n candidates (``numpy.unique``). The frequent n-grams become strings once, at the end
   (:class:`DecodeNgrams`). The id chunks (4 bytes per token) are the only copy of the corpus the job keeps
   between stages.

``pruning="none"`` counts every n-gram as a string in one pass (:class:`CountNgrams`); use it for ``min_count``
1 or 2, where nearly everything is frequent and pruning cannot help.
"""
