#include "engine/postprocess.h"

#include "engine/logprobs.h"

namespace ferry {

namespace {

TokenLogprobOut logprob_out(const TokenLogprob& lp, const Tokenizer& tokenizer) {
  return {lp.id, tokenizer.token_to_piece(lp.id), lp.logprob};
}

}  // namespace

TokenOutcome postprocess_token(Sequence& seq, std::span<const float> logits, const Tokenizer& tokenizer,
                               int32_t context) {
  TokenOutcome out;
  const GenerationRequest& req = seq.request;
  const int32_t tok = seq.sampler->sample(logits, seq.tokens);
  ++seq.n_generated;
  if (!req.ignore_eos && tokenizer.is_eog(tok)) {  // the end-of-generation token itself is not output
    out.finished = true;
    out.reason = FinishReason::Stop;
    out.text = seq.text->finish();
    return out;
  }
  seq.tokens.push_back(tok);
  seq.usage.completion_tokens += 1;
  GeneratedToken g;
  g.id = tok;
  if (req.logprobs >= 0) {
    const TokenLogprobs lp = token_logprobs(logits, tok, req.logprobs);
    g.chosen = logprob_out(lp.chosen, tokenizer);
    for (const TokenLogprob& t : lp.top) g.top.push_back(logprob_out(t, tokenizer));
  } else {
    g.chosen.id = tok;
  }
  out.tokens.push_back(std::move(g));
  out.text = seq.text->push(tok);
  if (seq.text->stopped()) {
    out.finished = true;
    out.reason = FinishReason::Stop;
  } else if (seq.usage.completion_tokens >= req.max_tokens || int32_t(seq.tokens.size()) > context) {
    // max_tokens reached, or the new token cannot be computed within the context: nothing more can follow.
    out.text += seq.text->finish();
    out.finished = true;
    out.reason = seq.text->stopped() ? FinishReason::Stop : FinishReason::Length;
  }
  if (!out.finished) {
    seq.channel->post(out.text, std::move(out.tokens), seq.usage);
    out.text.clear();
    out.tokens.clear();
  }
  return out;
}

}  // namespace ferry
