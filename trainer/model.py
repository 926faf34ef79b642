"""SpanBERT: a BERT encoder with a masked-LM head and the span boundary objective (SBO), for one device.

Written for a single device in plain PyTorch (no DeepSpeed here; ``trainer.engine`` wraps it). Configured
by :class:`trainer.config.ModelConfig`.

Encoder (BERT, Devlin et al. 2019): word + learned absolute position (+ optional token type) embeddings,
LayerNorm, dropout; then post-LayerNorm Transformer layers: ``x = LN(x + Drop(Attn(x)))``,
``x = LN(x + Drop(W2 GeLU(W1 x)))``, attention by ``torch.nn.functional.scaled_dot_product_attention``.

MLM head (the same layout as Hugging Face ``BertForMaskedLM``'s ``cls.predictions``, so export maps 1:1):
``transform = LN(GeLU(dense(h)))`` then ``decoder`` whose weight *is* the input word-embedding matrix,
plus a per-token output bias.

SBO head (Joshi et al. 2020): each target token x_i of a masked span x_s..x_e is predicted from the encodings
of the boundary tokens x_{s-1}, x_{e+1} and a position embedding p_i of i's place in the span:
``h = LN(GeLU(W1 [x_{s-1}; x_{e+1}; p_i]))``, ``y = LN(GeLU(W2 h))``, and y goes through the MLM output layer
(the tied decoder and its bias). Loss = MLM + SBO, both cross-entropies averaged over the target positions.

NSP head (BERT; ``ModelConfig.nsp``, for bi-sequence inputs ``[CLS] A [SEP] B [SEP]``): ``tanh(pooler(h_[CLS]))``
then a 2-way classifier (0 = B continues A); its cross-entropy, averaged over the pairs, is added to the loss.

Both heads run only on the target positions (labels != -100): their hidden states are gathered first, so the
vocabulary projection costs M x V, not B x T x V.

Batch interface (the masking collator's output; ``sample_id`` is ignored here):
``input_ids``, ``attention_mask`` [B, T]; ``labels`` [B, T] (-100 off target); ``span_left``, ``span_right``
(positions of x_{s-1}, x_{e+1}) and ``span_position`` (0-based place in the span) [B, T], 0 off target;
with NSP also ``token_type_ids`` [B, T] and ``next_sentence_label`` [B].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig

IGNORE_INDEX = -100


class Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        # Pre-training uses one segment; the embedding exists so exported models can fine-tune on pairs.
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size) if cfg.type_vocab_size else None
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.size(1)
        positions = torch.arange(T, device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)  # rows: query, key, value
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_dropout

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        B, T, H = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_p if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(B, T, H))


class Layer(nn.Module):
    """One post-LayerNorm Transformer layer, as in BERT."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.ln2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.ln1(x + self.dropout(self.attn(x, attn_mask)))
        return self.ln2(x + self.dropout(self.fc2(F.gelu(self.fc1(x)))))


class HeadTransform(nn.Module):
    """LN(GeLU(dense(h))): the MLM head's transform (``cls.predictions.transform`` in Hugging Face)."""

    def __init__(self, cfg: ModelConfig, in_features: int | None = None):
        super().__init__()
        self.dense = nn.Linear(in_features or cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(h)))


class MLMHead(nn.Module):
    """transform, then the decoder (weight tied to the word embeddings by :class:`SpanBert`, own bias)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.transform = HeadTransform(cfg)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=True)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(h))


class SBOHead(nn.Module):
    """y = LN(GeLU(W2 LN(GeLU(W1 [x_{s-1}; x_{e+1}; p_i])))), the input of the MLM output layer."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.position_embeddings = nn.Embedding(cfg.sbo_max_span_positions, cfg.hidden_size)
        self.layer1 = HeadTransform(cfg, in_features=3 * cfg.hidden_size)
        self.layer2 = HeadTransform(cfg)

    def forward(self, left: torch.Tensor, right: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        h = torch.cat([left, right, self.position_embeddings(position)], dim=-1)
        return self.layer2(self.layer1(h))


class NSPHead(nn.Module):
    """BERT's next sentence prediction: ``seq_relationship(tanh(pooler(h_[CLS])))`` -> 2 logits (0 = IsNext),
    laid out as Hugging Face's ``bert.pooler.dense`` and ``cls.seq_relationship``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.seq_relationship = nn.Linear(cfg.hidden_size, 2)

    def forward(self, cls_hidden: torch.Tensor) -> torch.Tensor:
        return self.seq_relationship(torch.tanh(self.pooler(cls_hidden)))


class SpanBert(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_layers)])
        self.mlm_head = MLMHead(cfg)
        self.sbo_head = SBOHead(cfg) if cfg.use_sbo else None
        self.nsp_head = NSPHead(cfg) if cfg.nsp else None
        self.apply(self._init_weights)
        # Tie after init: the decoder's weight is the embedding matrix (one Parameter, two modules).
        self.mlm_head.decoder.weight = self.embeddings.word_embeddings.weight

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    # -- encoder -------------------------------------------------------------------------------
    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states [B, T, H] of the last layer."""
        T = input_ids.size(1)
        if T > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {T} exceeds max_position_embeddings {self.config.max_position_embeddings}"
            )
        # SDPA's boolean mask: True where a query may attend to a key; [B, 1, 1, T] broadcasts over heads/queries.
        attn_mask = attention_mask.bool()[:, None, None, :] if attention_mask is not None else None
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, attn_mask)
        return x

    def mlm_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """MLM logits [B, T, V] at every position (what Hugging Face ``BertForMaskedLM`` returns)."""
        return self.mlm_head(self.encode(input_ids, attention_mask, token_type_ids))

    def nsp_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """NSP logits [B, 2] (Hugging Face ``BertForPreTraining``'s ``seq_relationship_logits``); needs ``nsp``."""
        if self.nsp_head is None:
            raise ValueError("this model has no NSP head (ModelConfig.nsp is false)")
        return self.nsp_head(self.encode(input_ids, attention_mask, token_type_ids)[:, 0])

    # -- training objective ----------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        span_left: torch.Tensor | None = None,
        span_right: torch.Tensor | None = None,
        span_position: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        **unused: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """Loss and statistics on the target positions.

        Returns ``loss`` (mlm_loss + sbo_loss), ``mlm_loss``, ``num_targets`` and, with the SBO objective,
        ``sbo_loss``; in eval mode also ``mlm_correct`` (and ``sbo_correct``), the number of targets whose argmax
        prediction is right (an argmax over M x V costs real time, so training steps skip it). The counts let
        callers aggregate exactly over batches. Without ``labels`` returns ``{"logits": mlm_logits}``.
        """
        if labels is None:
            return {"logits": self.mlm_logits(input_ids, attention_mask, token_type_ids)}
        B, T = input_ids.shape
        encoded = self.encode(input_ids, attention_mask, token_type_ids)
        hidden = encoded.reshape(B * T, -1)

        flat_labels = labels.reshape(-1)
        target_index = (flat_labels != IGNORE_INDEX).nonzero(as_tuple=True)[0]  # [M] positions in B*T
        targets = flat_labels.index_select(0, target_index)
        num_targets = target_index.numel()
        denominator = max(num_targets, 1)  # a batch without targets contributes 0, not NaN

        mlm_logits = self.mlm_head(hidden.index_select(0, target_index))  # [M, V]
        mlm_loss = F.cross_entropy(mlm_logits.float(), targets, reduction="sum") / denominator
        out = {"mlm_loss": mlm_loss, "num_targets": torch.tensor(num_targets, device=input_ids.device)}
        if not self.training:
            out["mlm_correct"] = (mlm_logits.argmax(-1) == targets).sum()
        loss = mlm_loss
        if self.sbo_head is not None:
            if span_left is None or span_right is None or span_position is None:
                raise ValueError("objective mlm+sbo needs span_left, span_right and span_position in the batch")
            row_start = target_index - target_index % T  # first position of the target's row in B*T
            left = hidden.index_select(0, row_start + span_left.reshape(-1).index_select(0, target_index))
            right = hidden.index_select(0, row_start + span_right.reshape(-1).index_select(0, target_index))
            position = span_position.reshape(-1).index_select(0, target_index)
            sbo_logits = self.mlm_head.decoder(self.sbo_head(left, right, position))  # [M, V]
            sbo_loss = F.cross_entropy(sbo_logits.float(), targets, reduction="sum") / denominator
            out["sbo_loss"] = sbo_loss
            if not self.training:
                out["sbo_correct"] = (sbo_logits.argmax(-1) == targets).sum()
            loss = loss + sbo_loss
        if self.nsp_head is not None:
            if next_sentence_label is None or token_type_ids is None:
                raise ValueError(
                    "the NSP objective needs next_sentence_label and token_type_ids in the batch (--segments 2)"
                )
            nsp_logits = self.nsp_head(encoded[:, 0])  # [B, 2] from [CLS]
            out["nsp_loss"] = F.cross_entropy(nsp_logits.float(), next_sentence_label)  # mean over pairs, as BERT
            out["num_pairs"] = torch.tensor(B, device=input_ids.device)
            if not self.training:
                out["nsp_correct"] = (nsp_logits.argmax(-1) == next_sentence_label).sum()
            loss = loss + out["nsp_loss"]
        out["loss"] = loss
        return out

    # -- accounting ------------------------------------------------------------------------------
    def num_parameters(self, *, non_embedding: bool = False) -> int:
        """Distinct parameters (the tied decoder weight counts once); optionally without embeddings."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            emb = self.embeddings
            n -= emb.word_embeddings.weight.numel() + emb.position_embeddings.weight.numel()
            if emb.token_type_embeddings is not None:
                n -= emb.token_type_embeddings.weight.numel()
        return n

    def flops_per_sequence(self, seq_len: int, num_targets: float) -> float:
        """Training FLOPs (forward + backward = 3 x forward) for one sequence of ``seq_len`` tokens.

        Encoder: 2 FLOPs per multiply-add of each weight per token, plus attention scores and their use
        (2 x 2 x T x H per token per layer); heads: on ``num_targets`` positions only (MLM transform + decoder,
        and the SBO head + decoder with that objective). This is the model's arithmetic, not the kernels'.
        """
        c = self.config
        H, L, V = c.hidden_size, c.num_layers, c.vocab_size
        per_layer = 2 * (4 * H * H + 2 * H * c.intermediate_size) + 4 * seq_len * H
        encoder = seq_len * L * per_layer
        head = num_targets * 2 * (H * H + H * V)
        if c.use_sbo:
            head += num_targets * 2 * (3 * H * H + H * H + H * V)
        if c.nsp:
            head += 2 * (H * H + 2 * H)
        return 3.0 * (encoder + head)
