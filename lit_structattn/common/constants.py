"""The special symbols, declared once for the whole project.

Every vocabulary starts with ``<pad>`` at id 0 (padding is id 0 in every batch). A vocabulary of
target sequences continues with ``<bos>`` = 1 and ``<eos>`` = 2, the ids the decoders start and
stop with (``Seq2Seq(bos_id=BOS_ID, eos_id=EOS_ID)``); ``<unk>`` follows where unknown tokens
are mapped. :class:`lit_structattn.datamodules.vocabulary.Vocabulary` lays the symbols out in this
order.
"""

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2

#: The specials of a word vocabulary without sequence boundaries (taggers, bAbI, NLI).
WORD_SPECIALS = (PAD, UNK)
#: The specials of a vocabulary of target sequences (tree transduction: no ``<unk>``).
SEQUENCE_SPECIALS = (PAD, BOS, EOS, UNK)
