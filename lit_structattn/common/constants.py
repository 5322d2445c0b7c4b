"""The special symbols and the stand-in for a forbidden score, declared once for the whole
project.

Every vocabulary starts with ``<pad>`` at id 0 (padding is id 0 in every batch). A vocabulary of
target sequences continues with ``<bos>`` = 1 and ``<eos>`` = 2, the ids the decoders start and
stop with (``Seq2Seq(bos_id=BOS_ID, eos_id=EOS_ID)``); ``<unk>`` follows where unknown tokens
are mapped. :class:`lit_structattn.datamodules.vocabulary.Vocabulary` lays the symbols out in this
order.

A score that forbids something (a masked slot, a ``-inf`` log-potential kept out of sums whose
gradients it would make NaN) is :func:`very_negative` of the dtype it is computed in.
"""

import torch

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2

#: The specials of a word vocabulary without sequence boundaries (taggers, bAbI, NLI).
WORD_SPECIALS = (PAD, UNK)
#: The specials of a vocabulary of target sequences (tree transduction: no ``<unk>``).
SEQUENCE_SPECIALS = (PAD, BOS, EOS, UNK)


def very_negative(dtype: torch.dtype) -> float:
    """A finite stand-in for log(0) (and for ``-inf`` scores, which would make log-sum-exps
    and their gradients NaN) in ``dtype`` (for a complex dtype, in its real part): far below
    any score, yet a sum of 2**32 of them is finite (``finfo(dtype).min / 2**32``, about
    -7.9e28 in float32 and bfloat16, -4.2e298 in float64).

    float16 has no number that is both: there it is the lowest finite float16 (-65504), good to
    mask a score that a softmax or a CRF then reads, both of which compute float16 in float32;
    sums of it are not finite in float16, so no sum is ever formed in float16.
    """
    info = torch.finfo(dtype)
    if info.max < 2.0**64:
        return info.min
    return info.min / 2**32
