/* abi_layout: pins the size and every member offset of each ABI struct (x86-64 / AArch64 LP64).
 * An accidental ABI break (a member moved, resized, inserted or removed) fails the build here.
 * A deliberate change of ABI 1.x appends members at the end of a struct: add pins for the new members
 * and update only that struct's size. Compiled as C99 with -Wall -Wextra -Werror -pedantic. */
#include <stddef.h>
#include <stdio.h>

#include <tokenhost/tokenhost.h>

#define TH_PIN_SIZE(type, size) _Static_assert(sizeof(type) == (size), "ABI break: sizeof(" #type ") changed")
#define TH_PIN_OFFSET(type, member, offset) \
  _Static_assert(offsetof(type, member) == (offset), "ABI break: " #type "." #member " moved")

#if !(defined(__LP64__) || defined(_LP64))
#error "the pinned ABI layout is for LP64 targets"
#endif

_Static_assert(TH_ABI_VERSION_MAJOR == 1, "ABI major changed: re-pin every struct");
TH_PIN_SIZE(th_attention_batch, 120); /* 104 through ABI 1.1, 112 through 1.3 */
TH_PIN_OFFSET(th_attention_batch, struct_size, 0);
TH_PIN_OFFSET(th_attention_batch, layer, 4);
TH_PIN_OFFSET(th_attention_batch, n_tokens, 8);
TH_PIN_OFFSET(th_attention_batch, n_seqs, 12);
TH_PIN_OFFSET(th_attention_batch, n_heads, 16);
TH_PIN_OFFSET(th_attention_batch, n_kv_heads, 20);
TH_PIN_OFFSET(th_attention_batch, head_dim, 24);
TH_PIN_OFFSET(th_attention_batch, scale, 28);
TH_PIN_OFFSET(th_attention_batch, q, 32);
TH_PIN_OFFSET(th_attention_batch, q_row_stride, 40);
TH_PIN_OFFSET(th_attention_batch, positions, 48);
TH_PIN_OFFSET(th_attention_batch, seq_start, 56);
TH_PIN_OFFSET(th_attention_batch, kv_len, 64);
TH_PIN_OFFSET(th_attention_batch, block_tables, 72);
TH_PIN_OFFSET(th_attention_batch, kv, 80);
TH_PIN_OFFSET(th_attention_batch, out, 88);
TH_PIN_OFFSET(th_attention_batch, out_row_stride, 96);
TH_PIN_OFFSET(th_attention_batch, device, 104);
TH_PIN_OFFSET(th_attention_batch, device_index, 108);
TH_PIN_OFFSET(th_attention_batch, row_parent, 112);
TH_PIN_SIZE(th_attention_vtable, 40);
TH_PIN_OFFSET(th_attention_vtable, struct_size, 0);
TH_PIN_OFFSET(th_attention_vtable, create, 8);
TH_PIN_OFFSET(th_attention_vtable, destroy, 16);
TH_PIN_OFFSET(th_attention_vtable, check, 24);
TH_PIN_OFFSET(th_attention_vtable, forward, 32);
TH_PIN_SIZE(th_device, 40);
TH_PIN_OFFSET(th_device, struct_size, 0);
TH_PIN_OFFSET(th_device, kind, 4);
TH_PIN_OFFSET(th_device, index, 8);
TH_PIN_OFFSET(th_device, name, 16);
TH_PIN_OFFSET(th_device, memory_bytes, 24);
TH_PIN_OFFSET(th_device, threads, 32);
TH_PIN_SIZE(th_tensor, 96);
TH_PIN_OFFSET(th_tensor, struct_size, 0);
TH_PIN_OFFSET(th_tensor, dtype, 4);
TH_PIN_OFFSET(th_tensor, n_dims, 8);
TH_PIN_OFFSET(th_tensor, ne, 16);
TH_PIN_OFFSET(th_tensor, nb, 48);
TH_PIN_OFFSET(th_tensor, data, 80);
TH_PIN_OFFSET(th_tensor, device, 88);
TH_PIN_SIZE(th_model_info, 72);
TH_PIN_OFFSET(th_model_info, struct_size, 0);
TH_PIN_OFFSET(th_model_info, architecture, 8);
TH_PIN_OFFSET(th_model_info, n_layers, 16);
TH_PIN_OFFSET(th_model_info, dim, 20);
TH_PIN_OFFSET(th_model_info, n_heads, 24);
TH_PIN_OFFSET(th_model_info, n_kv_heads, 28);
TH_PIN_OFFSET(th_model_info, head_dim, 32);
TH_PIN_OFFSET(th_model_info, ffn_dim, 36);
TH_PIN_OFFSET(th_model_info, vocab_size, 40);
TH_PIN_OFFSET(th_model_info, context_len, 44);
TH_PIN_OFFSET(th_model_info, n_experts, 48);
TH_PIN_OFFSET(th_model_info, n_experts_used, 52);
TH_PIN_OFFSET(th_model_info, weight_dtype, 56);
TH_PIN_OFFSET(th_model_info, act_dtype, 60);
TH_PIN_OFFSET(th_model_info, kv_dtype, 64);
TH_PIN_OFFSET(th_model_info, expert_weights_norm, 68); /* 1.10: in what was padding (size unchanged) */
TH_PIN_SIZE(th_check_query, 32);
TH_PIN_OFFSET(th_check_query, struct_size, 0);
TH_PIN_OFFSET(th_check_query, model, 8);
TH_PIN_OFFSET(th_check_query, device, 16);
TH_PIN_OFFSET(th_check_query, config, 24);
TH_PIN_SIZE(th_create_args, 48); /* 40 through ABI 1.10 */
TH_PIN_OFFSET(th_create_args, struct_size, 0);
TH_PIN_OFFSET(th_create_args, host_ctx, 8);
TH_PIN_OFFSET(th_create_args, config, 16);
TH_PIN_OFFSET(th_create_args, model, 24);
TH_PIN_OFFSET(th_create_args, device, 32);
TH_PIN_OFFSET(th_create_args, vocab, 40);
/* th_vocab (ABI 1.11) */
TH_PIN_SIZE(th_vocab, 40);
TH_PIN_OFFSET(th_vocab, struct_size, 0);
TH_PIN_OFFSET(th_vocab, n_tokens, 4);
TH_PIN_OFFSET(th_vocab, bytes, 8);
TH_PIN_OFFSET(th_vocab, offsets, 16);
TH_PIN_OFFSET(th_vocab, attrs, 24);
TH_PIN_OFFSET(th_vocab, eos, 32);
TH_PIN_SIZE(th_vtable_head, 32);
TH_PIN_OFFSET(th_vtable_head, struct_size, 0);
TH_PIN_OFFSET(th_vtable_head, create, 8);
TH_PIN_OFFSET(th_vtable_head, destroy, 16);
TH_PIN_OFFSET(th_vtable_head, check, 24);
TH_PIN_SIZE(th_plugin_descriptor, 40);
TH_PIN_OFFSET(th_plugin_descriptor, struct_size, 0);
TH_PIN_OFFSET(th_plugin_descriptor, abi_major, 4);
TH_PIN_OFFSET(th_plugin_descriptor, abi_minor, 6);
TH_PIN_OFFSET(th_plugin_descriptor, kind, 8);
TH_PIN_OFFSET(th_plugin_descriptor, id, 16);
TH_PIN_OFFSET(th_plugin_descriptor, version, 24);
TH_PIN_OFFSET(th_plugin_descriptor, vtable, 32);
TH_PIN_SIZE(th_metric_desc, 56);
TH_PIN_OFFSET(th_metric_desc, struct_size, 0);
TH_PIN_OFFSET(th_metric_desc, type, 4);
TH_PIN_OFFSET(th_metric_desc, name, 8);
TH_PIN_OFFSET(th_metric_desc, help, 16);
TH_PIN_OFFSET(th_metric_desc, label_names, 24);
TH_PIN_OFFSET(th_metric_desc, n_labels, 32);
TH_PIN_OFFSET(th_metric_desc, buckets, 40);
TH_PIN_OFFSET(th_metric_desc, n_buckets, 48);
TH_PIN_SIZE(th_model_run_request, 48);
TH_PIN_OFFSET(th_model_run_request, struct_size, 0);
TH_PIN_OFFSET(th_model_run_request, model, 8);
TH_PIN_OFFSET(th_model_run_request, tokens, 16);
TH_PIN_OFFSET(th_model_run_request, n_tokens, 24);
TH_PIN_OFFSET(th_model_run_request, max_new_tokens, 28);
TH_PIN_OFFSET(th_model_run_request, temperature, 32);
TH_PIN_OFFSET(th_model_run_request, seed, 40);
TH_PIN_SIZE(th_model_run_result, 24);
TH_PIN_OFFSET(th_model_run_result, struct_size, 0);
TH_PIN_OFFSET(th_model_run_result, tokens, 8);
TH_PIN_OFFSET(th_model_run_result, capacity, 16);
TH_PIN_OFFSET(th_model_run_result, n_tokens, 20);
TH_PIN_SIZE(th_host_api, 192);
TH_PIN_OFFSET(th_host_api, struct_size, 0);
TH_PIN_OFFSET(th_host_api, abi_major, 4);
TH_PIN_OFFSET(th_host_api, abi_minor, 6);
TH_PIN_OFFSET(th_host_api, host_version, 8);
TH_PIN_OFFSET(th_host_api, error_set, 16);
TH_PIN_OFFSET(th_host_api, log, 24);
TH_PIN_OFFSET(th_host_api, config_get_int, 32);
TH_PIN_OFFSET(th_host_api, config_get_double, 40);
TH_PIN_OFFSET(th_host_api, config_get_bool, 48);
TH_PIN_OFFSET(th_host_api, config_get_string, 56);
TH_PIN_OFFSET(th_host_api, metric_create, 64);
TH_PIN_OFFSET(th_host_api, metric_add, 72);
TH_PIN_OFFSET(th_host_api, metric_set, 80);
TH_PIN_OFFSET(th_host_api, metric_observe, 88);
TH_PIN_OFFSET(th_host_api, mem_alloc, 96);
TH_PIN_OFFSET(th_host_api, mem_free, 104);
TH_PIN_OFFSET(th_host_api, model_run, 112);
TH_PIN_OFFSET(th_host_api, parallel_for, 120); /* 1.1 */
TH_PIN_OFFSET(th_host_api, compute_threads, 128); /* 1.1 */
TH_PIN_OFFSET(th_host_api, draft_open, 136); /* 1.5 */
TH_PIN_OFFSET(th_host_api, draft_append, 144); /* 1.5 */
TH_PIN_OFFSET(th_host_api, draft_rollback, 152); /* 1.5 */
TH_PIN_OFFSET(th_host_api, draft_run, 160); /* 1.5 */
TH_PIN_OFFSET(th_host_api, draft_close, 168); /* 1.5 */
TH_PIN_OFFSET(th_host_api, peer_send, 176); /* 1.9 */
TH_PIN_OFFSET(th_host_api, grouped_matmul, 184); /* 1.10 */
TH_PIN_SIZE(th_grouped_matmul_args, 48); /* 1.10 */
TH_PIN_OFFSET(th_grouped_matmul_args, struct_size, 0);
TH_PIN_OFFSET(th_grouped_matmul_args, n_groups, 4);
TH_PIN_OFFSET(th_grouped_matmul_args, n_products, 8);
TH_PIN_OFFSET(th_grouped_matmul_args, cols, 12);
TH_PIN_OFFSET(th_grouped_matmul_args, weights, 16);
TH_PIN_OFFSET(th_grouped_matmul_args, row_begin, 24);
TH_PIN_OFFSET(th_grouped_matmul_args, x, 32);
TH_PIN_OFFSET(th_grouped_matmul_args, y, 40);
TH_PIN_SIZE(th_draft_open_args, 24); /* 1.5 */
TH_PIN_OFFSET(th_draft_open_args, struct_size, 0);
TH_PIN_OFFSET(th_draft_open_args, model, 8);
TH_PIN_OFFSET(th_draft_open_args, n_layers, 16);
TH_PIN_SIZE(th_draft_run_args, 56); /* 1.5 */
TH_PIN_OFFSET(th_draft_run_args, struct_size, 0);
TH_PIN_OFFSET(th_draft_run_args, n_sessions, 4);
TH_PIN_OFFSET(th_draft_run_args, sessions, 8);
TH_PIN_OFFSET(th_draft_run_args, n_draft, 16);
TH_PIN_OFFSET(th_draft_run_args, max_draft, 24);
TH_PIN_OFFSET(th_draft_run_args, min_prob, 28);
TH_PIN_OFFSET(th_draft_run_args, tokens, 32);
TH_PIN_OFFSET(th_draft_run_args, probs, 40);
TH_PIN_OFFSET(th_draft_run_args, n_written, 48);
TH_PIN_SIZE(th_kv_layout, 136); /* 128 through ABI 1.1 */
TH_PIN_OFFSET(th_kv_layout, struct_size, 0);
TH_PIN_OFFSET(th_kv_layout, block_size, 4);
TH_PIN_OFFSET(th_kv_layout, n_blocks, 8);
TH_PIN_OFFSET(th_kv_layout, n_layers, 12);
TH_PIN_OFFSET(th_kv_layout, n_kv_heads, 16);
TH_PIN_OFFSET(th_kv_layout, head_dim, 20);
TH_PIN_OFFSET(th_kv_layout, dtype, 24);
TH_PIN_OFFSET(th_kv_layout, quant_group, 28);
TH_PIN_OFFSET(th_kv_layout, layer_stride, 32);
TH_PIN_OFFSET(th_kv_layout, block_stride, 40);
TH_PIN_OFFSET(th_kv_layout, head_stride, 48);
TH_PIN_OFFSET(th_kv_layout, token_stride, 56);
TH_PIN_OFFSET(th_kv_layout, k_base, 64);
TH_PIN_OFFSET(th_kv_layout, v_base, 72);
TH_PIN_OFFSET(th_kv_layout, scale_layer_stride, 80);
TH_PIN_OFFSET(th_kv_layout, scale_block_stride, 88);
TH_PIN_OFFSET(th_kv_layout, scale_head_stride, 96);
TH_PIN_OFFSET(th_kv_layout, scale_token_stride, 104);
TH_PIN_OFFSET(th_kv_layout, k_scale_base, 112);
TH_PIN_OFFSET(th_kv_layout, v_scale_base, 120);
TH_PIN_OFFSET(th_kv_layout, device, 128);
TH_PIN_OFFSET(th_kv_layout, device_index, 132);
TH_PIN_SIZE(th_kv_stats, 48);
TH_PIN_OFFSET(th_kv_stats, struct_size, 0);
TH_PIN_OFFSET(th_kv_stats, total_blocks, 4);
TH_PIN_OFFSET(th_kv_stats, used_blocks, 8);
TH_PIN_OFFSET(th_kv_stats, free_blocks, 12);
TH_PIN_OFFSET(th_kv_stats, shared_blocks, 16);
TH_PIN_OFFSET(th_kv_stats, n_seqs, 20);
TH_PIN_OFFSET(th_kv_stats, cached_blocks, 24);    /* ABI 1.5 */
TH_PIN_OFFSET(th_kv_stats, held_blocks, 28);      /* ABI 1.5 */
TH_PIN_OFFSET(th_kv_stats, evicted_blocks, 32);   /* ABI 1.5 */
TH_PIN_OFFSET(th_kv_stats, published_blocks, 40); /* ABI 1.5 */
TH_PIN_SIZE(th_kvcache_vtable, 120);
TH_PIN_OFFSET(th_kvcache_vtable, struct_size, 0);
TH_PIN_OFFSET(th_kvcache_vtable, create, 8);
TH_PIN_OFFSET(th_kvcache_vtable, destroy, 16);
TH_PIN_OFFSET(th_kvcache_vtable, check, 24);
TH_PIN_OFFSET(th_kvcache_vtable, get_layout, 32);
TH_PIN_OFFSET(th_kvcache_vtable, seq_reserve, 40);
TH_PIN_OFFSET(th_kvcache_vtable, seq_free, 48);
TH_PIN_OFFSET(th_kvcache_vtable, seq_fork, 56);
TH_PIN_OFFSET(th_kvcache_vtable, seq_blocks, 64);
TH_PIN_OFFSET(th_kvcache_vtable, stats, 72);
TH_PIN_OFFSET(th_kvcache_vtable, seq_truncate, 80); /* ABI 1.4 */
TH_PIN_OFFSET(th_kvcache_vtable, seq_lookup, 88);   /* ABI 1.5 */
TH_PIN_OFFSET(th_kvcache_vtable, seq_publish, 96);  /* ABI 1.5 */
TH_PIN_OFFSET(th_kvcache_vtable, cache_flush, 104); /* ABI 1.5 */
TH_PIN_OFFSET(th_kvcache_vtable, seq_drop_blocks, 112); /* ABI 1.6 */
TH_PIN_SIZE(th_moe_gate_args, 48);
TH_PIN_OFFSET(th_moe_gate_args, struct_size, 0);
TH_PIN_OFFSET(th_moe_gate_args, layer, 4);
TH_PIN_OFFSET(th_moe_gate_args, n_tokens, 8);
TH_PIN_OFFSET(th_moe_gate_args, n_experts, 12);
TH_PIN_OFFSET(th_moe_gate_args, k, 16);
TH_PIN_OFFSET(th_moe_gate_args, logits, 24);
TH_PIN_OFFSET(th_moe_gate_args, expert_ids, 32);
TH_PIN_OFFSET(th_moe_gate_args, expert_weights, 40);
TH_PIN_SIZE(th_moe_expert_weights, 288);
TH_PIN_OFFSET(th_moe_expert_weights, gate, 0);
TH_PIN_OFFSET(th_moe_expert_weights, up, 96);
TH_PIN_OFFSET(th_moe_expert_weights, down, 192);
TH_PIN_SIZE(th_moe_experts_args, 80);
TH_PIN_OFFSET(th_moe_experts_args, struct_size, 0);
TH_PIN_OFFSET(th_moe_experts_args, layer, 4);
TH_PIN_OFFSET(th_moe_experts_args, n_tokens, 8);
TH_PIN_OFFSET(th_moe_experts_args, dim, 12);
TH_PIN_OFFSET(th_moe_experts_args, ffn_dim, 16);
TH_PIN_OFFSET(th_moe_experts_args, n_experts, 20);
TH_PIN_OFFSET(th_moe_experts_args, k, 24);
TH_PIN_OFFSET(th_moe_experts_args, x, 32);
TH_PIN_OFFSET(th_moe_experts_args, expert_ids, 40);
TH_PIN_OFFSET(th_moe_experts_args, expert_weights, 48);
TH_PIN_OFFSET(th_moe_experts_args, experts, 56);
TH_PIN_OFFSET(th_moe_experts_args, shared_expert, 64);
TH_PIN_OFFSET(th_moe_experts_args, out, 72);
TH_PIN_SIZE(th_moe_load, 56);
TH_PIN_OFFSET(th_moe_load, struct_size, 0);
TH_PIN_OFFSET(th_moe_load, layer, 4);
TH_PIN_OFFSET(th_moe_load, n_experts, 8);
TH_PIN_OFFSET(th_moe_load, n_devices, 12);
TH_PIN_OFFSET(th_moe_load, tokens_per_expert, 16);
TH_PIN_OFFSET(th_moe_load, placement, 24);
TH_PIN_OFFSET(th_moe_load, slots_per_device, 32); /* ABI 1.10 */
TH_PIN_OFFSET(th_moe_load, slot_expert, 40);      /* ABI 1.10 */
TH_PIN_OFFSET(th_moe_load, device_seconds, 48);   /* ABI 1.10 */
TH_PIN_SIZE(th_moe_placement, 32);
TH_PIN_OFFSET(th_moe_placement, struct_size, 0);
TH_PIN_OFFSET(th_moe_placement, placement, 8);
TH_PIN_OFFSET(th_moe_placement, changed, 16);
TH_PIN_OFFSET(th_moe_placement, slot_expert, 24); /* ABI 1.10 */
TH_PIN_SIZE(th_moe_vtable, 56);
TH_PIN_OFFSET(th_moe_vtable, struct_size, 0);
TH_PIN_OFFSET(th_moe_vtable, create, 8);
TH_PIN_OFFSET(th_moe_vtable, destroy, 16);
TH_PIN_OFFSET(th_moe_vtable, check, 24);
TH_PIN_OFFSET(th_moe_vtable, gate, 32);
TH_PIN_OFFSET(th_moe_vtable, experts, 40);
TH_PIN_OFFSET(th_moe_vtable, rebalance, 48);
TH_PIN_SIZE(th_route_candidate, 56);
TH_PIN_OFFSET(th_route_candidate, engine_id, 0);
TH_PIN_OFFSET(th_route_candidate, model, 8);
TH_PIN_OFFSET(th_route_candidate, running, 16);
TH_PIN_OFFSET(th_route_candidate, waiting, 20);
TH_PIN_OFFSET(th_route_candidate, load, 24);
TH_PIN_OFFSET(th_route_candidate, cost_per_mtok, 32);
TH_PIN_OFFSET(th_route_candidate, quality, 40);
TH_PIN_OFFSET(th_route_candidate, healthy, 48);
TH_PIN_SIZE(th_route_request, 160); /* 88 through ABI 1.6, 136 in 1.7, 152 in 1.8 */
TH_PIN_OFFSET(th_route_request, struct_size, 0);
TH_PIN_OFFSET(th_route_request, request_id, 8);
TH_PIN_OFFSET(th_route_request, model, 16);
TH_PIN_OFFSET(th_route_request, prompt, 24);
TH_PIN_OFFSET(th_route_request, prompt_len, 32);
TH_PIN_OFFSET(th_route_request, tokens, 40);
TH_PIN_OFFSET(th_route_request, n_tokens, 48);
TH_PIN_OFFSET(th_route_request, session_key, 56);
TH_PIN_OFFSET(th_route_request, candidates, 64);
TH_PIN_OFFSET(th_route_request, n_candidates, 72);
TH_PIN_OFFSET(th_route_request, cached_tokens, 80); /* 1.5 */
TH_PIN_OFFSET(th_route_request, max_tokens, 88); /* 1.7 */
TH_PIN_OFFSET(th_route_request, cache_namespace, 96); /* 1.7 */
TH_PIN_OFFSET(th_route_request, params_key, 104); /* 1.7 */
TH_PIN_OFFSET(th_route_request, deterministic, 112); /* 1.7 */
TH_PIN_OFFSET(th_route_request, request_class, 120); /* 1.7 */
TH_PIN_OFFSET(th_route_request, payer, 128); /* 1.7 */
TH_PIN_OFFSET(th_route_request, candidate_nodes, 136); /* 1.8 */
TH_PIN_OFFSET(th_route_request, candidate_rtt_s, 144); /* 1.8 */
TH_PIN_OFFSET(th_route_request, candidate_roles, 152); /* 1.9 */
TH_PIN_SIZE(th_route_decision, 80); /* 48 through ABI 1.6 */
TH_PIN_OFFSET(th_route_decision, struct_size, 0);
TH_PIN_OFFSET(th_route_decision, action, 4);
TH_PIN_OFFSET(th_route_decision, target, 8);
TH_PIN_OFFSET(th_route_decision, cascade, 16);
TH_PIN_OFFSET(th_route_decision, n_cascade, 24);
TH_PIN_OFFSET(th_route_decision, cached_text, 32);
TH_PIN_OFFSET(th_route_decision, cached_len, 40);
TH_PIN_OFFSET(th_route_decision, check_every, 48); /* 1.7 */
TH_PIN_OFFSET(th_route_decision, cached_tokens, 56); /* 1.7 */
TH_PIN_OFFSET(th_route_decision, n_cached_tokens, 64); /* 1.7 */
TH_PIN_OFFSET(th_route_decision, cached_stop, 68); /* 1.7 */
TH_PIN_OFFSET(th_route_decision, n_samples, 72); /* 1.7 */
TH_PIN_SIZE(th_route_feedback, 152); /* 72 through ABI 1.6 */
TH_PIN_OFFSET(th_route_feedback, struct_size, 0);
TH_PIN_OFFSET(th_route_feedback, request_id, 8);
TH_PIN_OFFSET(th_route_feedback, engine_id, 16);
TH_PIN_OFFSET(th_route_feedback, ok, 24);
TH_PIN_OFFSET(th_route_feedback, ttft_s, 32);
TH_PIN_OFFSET(th_route_feedback, total_s, 40);
TH_PIN_OFFSET(th_route_feedback, tokens_in, 48);
TH_PIN_OFFSET(th_route_feedback, tokens_out, 52);
TH_PIN_OFFSET(th_route_feedback, output_text, 56);
TH_PIN_OFFSET(th_route_feedback, output_len, 64);
TH_PIN_OFFSET(th_route_feedback, prompt_tokens, 72); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, n_prompt_tokens, 80); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, output_tokens, 88); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, stop, 96); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, cache_namespace, 104); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, params_key, 112); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, deterministic, 120); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, cached, 124); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, stages, 128); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, cost, 136); /* 1.7 */
TH_PIN_OFFSET(th_route_feedback, signal, 144); /* 1.7 */
TH_PIN_SIZE(th_route_signal, 48);
TH_PIN_OFFSET(th_route_signal, n_tokens, 4); /* 1.7 */
TH_PIN_OFFSET(th_route_signal, mean_logprob, 8); /* 1.7 */
TH_PIN_OFFSET(th_route_signal, min_logprob, 16); /* 1.7 */
TH_PIN_OFFSET(th_route_signal, mean_entropy, 24); /* 1.7 */
TH_PIN_OFFSET(th_route_signal, max_entropy, 32); /* 1.7 */
TH_PIN_OFFSET(th_route_signal, stop, 40); /* 1.7 */
TH_PIN_SIZE(th_route_stage, 80);
TH_PIN_OFFSET(th_route_stage, request_id, 8); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, stage, 16); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, n_stages, 20); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, candidate, 24); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, engine_id, 32); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, model, 40); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, cost_per_mtok, 48); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, quality, 56); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, tokens, 64); /* 1.7 */
TH_PIN_OFFSET(th_route_stage, signal, 72); /* 1.7 */
TH_PIN_SIZE(th_route_answer, 64);
TH_PIN_OFFSET(th_route_answer, candidate, 4); /* 1.7 */
TH_PIN_OFFSET(th_route_answer, engine_id, 8); /* 1.7 */
TH_PIN_OFFSET(th_route_answer, model, 16); /* 1.7 */
TH_PIN_OFFSET(th_route_answer, tokens, 24); /* 1.7 */
TH_PIN_OFFSET(th_route_answer, n_tokens, 32); /* 1.7 */
TH_PIN_OFFSET(th_route_answer, text, 40); /* 1.7 */
TH_PIN_OFFSET(th_route_answer, text_len, 48); /* 1.7 */
TH_PIN_OFFSET(th_route_answer, signal, 56); /* 1.7 */
TH_PIN_SIZE(th_route_ensemble, 32);
TH_PIN_OFFSET(th_route_ensemble, request_id, 8); /* 1.7 */
TH_PIN_OFFSET(th_route_ensemble, answers, 16); /* 1.7 */
TH_PIN_OFFSET(th_route_ensemble, n_answers, 24); /* 1.7 */
TH_PIN_SIZE(th_router_vtable, 64); /* 48 through ABI 1.6 */
TH_PIN_OFFSET(th_router_vtable, struct_size, 0);
TH_PIN_OFFSET(th_router_vtable, create, 8);
TH_PIN_OFFSET(th_router_vtable, destroy, 16);
TH_PIN_OFFSET(th_router_vtable, check, 24);
TH_PIN_OFFSET(th_router_vtable, route, 32);
TH_PIN_OFFSET(th_router_vtable, feedback, 40);
TH_PIN_OFFSET(th_router_vtable, escalate, 48); /* 1.7 */
TH_PIN_OFFSET(th_router_vtable, select, 56); /* 1.7 */
TH_PIN_SIZE(th_sched_seq, 48);
TH_PIN_OFFSET(th_sched_seq, seq_id, 0);
TH_PIN_OFFSET(th_sched_seq, state, 8);
TH_PIN_OFFSET(th_sched_seq, priority, 12);
TH_PIN_OFFSET(th_sched_seq, arrival_ns, 16);
TH_PIN_OFFSET(th_sched_seq, prompt_len, 24);
TH_PIN_OFFSET(th_sched_seq, prefilled, 28);
TH_PIN_OFFSET(th_sched_seq, generated, 32);
TH_PIN_OFFSET(th_sched_seq, max_new_tokens, 36);
TH_PIN_OFFSET(th_sched_seq, kv_blocks, 40);
TH_PIN_SIZE(th_sched_state, 72);
TH_PIN_OFFSET(th_sched_state, struct_size, 0);
TH_PIN_OFFSET(th_sched_state, seqs, 8);
TH_PIN_OFFSET(th_sched_state, n_seqs, 16);
TH_PIN_OFFSET(th_sched_state, total_kv_blocks, 20);
TH_PIN_OFFSET(th_sched_state, free_kv_blocks, 24);
TH_PIN_OFFSET(th_sched_state, block_size, 28);
TH_PIN_OFFSET(th_sched_state, max_step_tokens, 32);
TH_PIN_OFFSET(th_sched_state, max_step_seqs, 36);
TH_PIN_OFFSET(th_sched_state, now_ns, 40);
TH_PIN_OFFSET(th_sched_state, seq_clients, 48);  /* ABI 1.3 */
TH_PIN_OFFSET(th_sched_state, seq_draft, 56);    /* ABI 1.4 */
TH_PIN_OFFSET(th_sched_state, seq_cached, 64);   /* ABI 1.5 */
TH_PIN_SIZE(th_sched_item, 16);
TH_PIN_OFFSET(th_sched_item, seq_id, 0);
TH_PIN_OFFSET(th_sched_item, n_tokens, 8);
TH_PIN_SIZE(th_sched_decision, 48);
TH_PIN_OFFSET(th_sched_decision, struct_size, 0);
TH_PIN_OFFSET(th_sched_decision, run, 8);
TH_PIN_OFFSET(th_sched_decision, n_run, 16);
TH_PIN_OFFSET(th_sched_decision, preempt, 24);
TH_PIN_OFFSET(th_sched_decision, n_preempt, 32);
TH_PIN_OFFSET(th_sched_decision, run_draft, 40); /* ABI 1.4 */
TH_PIN_SIZE(th_scheduler_vtable, 40);
TH_PIN_OFFSET(th_scheduler_vtable, struct_size, 0);
TH_PIN_OFFSET(th_scheduler_vtable, create, 8);
TH_PIN_OFFSET(th_scheduler_vtable, destroy, 16);
TH_PIN_OFFSET(th_scheduler_vtable, check, 24);
TH_PIN_OFFSET(th_scheduler_vtable, schedule, 32);
TH_PIN_SIZE(th_spec_seq, 24);
TH_PIN_OFFSET(th_spec_seq, seq_id, 0);
TH_PIN_OFFSET(th_spec_seq, tokens, 8);
TH_PIN_OFFSET(th_spec_seq, n_tokens, 16);
TH_PIN_SIZE(th_spec_draft, 24);
TH_PIN_OFFSET(th_spec_draft, tokens, 0);
TH_PIN_OFFSET(th_spec_draft, parents, 8);
TH_PIN_OFFSET(th_spec_draft, n_draft, 16);
TH_PIN_SIZE(th_spec_propose_args, 72);
TH_PIN_OFFSET(th_spec_propose_args, struct_size, 0);
TH_PIN_OFFSET(th_spec_propose_args, seqs, 8);
TH_PIN_OFFSET(th_spec_propose_args, n_seqs, 16);
TH_PIN_OFFSET(th_spec_propose_args, max_draft, 20);
TH_PIN_OFFSET(th_spec_propose_args, drafts, 24);
TH_PIN_OFFSET(th_spec_propose_args, seq_max_draft, 32); /* ABI 1.4 */
TH_PIN_OFFSET(th_spec_propose_args, dist_capacity, 40); /* ABI 1.4 */
TH_PIN_OFFSET(th_spec_propose_args, dist_tokens, 48);   /* ABI 1.4 */
TH_PIN_OFFSET(th_spec_propose_args, dist_probs, 56);    /* ABI 1.4 */
TH_PIN_OFFSET(th_spec_propose_args, dist_len, 64);      /* ABI 1.4 */
TH_PIN_SIZE(th_spec_decode_vtable, 56);
TH_PIN_OFFSET(th_spec_decode_vtable, struct_size, 0);
TH_PIN_OFFSET(th_spec_decode_vtable, create, 8);
TH_PIN_OFFSET(th_spec_decode_vtable, destroy, 16);
TH_PIN_OFFSET(th_spec_decode_vtable, check, 24);
TH_PIN_OFFSET(th_spec_decode_vtable, propose, 32);
TH_PIN_OFFSET(th_spec_decode_vtable, accepted, 40);
TH_PIN_OFFSET(th_spec_decode_vtable, seq_end, 48);

/* th_kv_connector.h (ABI 1.9) */
TH_PIN_SIZE(th_kv_transfer, 64);
TH_PIN_OFFSET(th_kv_transfer, struct_size, 0);
TH_PIN_OFFSET(th_kv_transfer, ticket, 8);
TH_PIN_OFFSET(th_kv_transfer, namespace_id, 16);
TH_PIN_OFFSET(th_kv_transfer, keys, 24);
TH_PIN_OFFSET(th_kv_transfer, blocks, 32);
TH_PIN_OFFSET(th_kv_transfer, n_blocks, 40);
TH_PIN_OFFSET(th_kv_transfer, layout, 48);
TH_PIN_OFFSET(th_kv_transfer, peer, 56);
TH_PIN_SIZE(th_kv_completion, 24);
TH_PIN_OFFSET(th_kv_completion, ticket, 0);
TH_PIN_OFFSET(th_kv_completion, status, 8);
TH_PIN_OFFSET(th_kv_completion, n_done, 12);
TH_PIN_OFFSET(th_kv_completion, message, 16);
TH_PIN_SIZE(th_kv_connector_stats, 48);
TH_PIN_OFFSET(th_kv_connector_stats, struct_size, 0);
TH_PIN_OFFSET(th_kv_connector_stats, stored_blocks, 8);
TH_PIN_OFFSET(th_kv_connector_stats, stored_bytes, 16);
TH_PIN_OFFSET(th_kv_connector_stats, capacity_bytes, 24);
TH_PIN_OFFSET(th_kv_connector_stats, evicted_blocks, 32);
TH_PIN_OFFSET(th_kv_connector_stats, refused_blocks, 40);
TH_PIN_SIZE(th_kv_connector_vtable, 88);
TH_PIN_OFFSET(th_kv_connector_vtable, struct_size, 0);
TH_PIN_OFFSET(th_kv_connector_vtable, create, 8);
TH_PIN_OFFSET(th_kv_connector_vtable, destroy, 16);
TH_PIN_OFFSET(th_kv_connector_vtable, check, 24);
TH_PIN_OFFSET(th_kv_connector_vtable, contains, 32);
TH_PIN_OFFSET(th_kv_connector_vtable, save, 40);
TH_PIN_OFFSET(th_kv_connector_vtable, load, 48);
TH_PIN_OFFSET(th_kv_connector_vtable, poll, 56);
TH_PIN_OFFSET(th_kv_connector_vtable, cancel, 64);
TH_PIN_OFFSET(th_kv_connector_vtable, stats, 72);
TH_PIN_OFFSET(th_kv_connector_vtable, receive, 80);

/* th_constraint.h (ABI 1.11) */
TH_PIN_SIZE(th_constraint_source, 32);
TH_PIN_OFFSET(th_constraint_source, struct_size, 0);
TH_PIN_OFFSET(th_constraint_source, type, 8);
TH_PIN_OFFSET(th_constraint_source, text, 16);
TH_PIN_OFFSET(th_constraint_source, gbnf, 24);
TH_PIN_SIZE(th_constraint_mask_args, 40);
TH_PIN_OFFSET(th_constraint_mask_args, struct_size, 0);
TH_PIN_OFFSET(th_constraint_mask_args, states, 8);
TH_PIN_OFFSET(th_constraint_mask_args, n_states, 16);
TH_PIN_OFFSET(th_constraint_mask_args, words_per_mask, 20);
TH_PIN_OFFSET(th_constraint_mask_args, masks, 24);
TH_PIN_OFFSET(th_constraint_mask_args, complete, 32);
TH_PIN_SIZE(th_constraint_vtable, 88);
TH_PIN_OFFSET(th_constraint_vtable, struct_size, 0);
TH_PIN_OFFSET(th_constraint_vtable, create, 8);
TH_PIN_OFFSET(th_constraint_vtable, destroy, 16);
TH_PIN_OFFSET(th_constraint_vtable, check, 24);
TH_PIN_OFFSET(th_constraint_vtable, compile, 32);
TH_PIN_OFFSET(th_constraint_vtable, release, 40);
TH_PIN_OFFSET(th_constraint_vtable, start, 48);
TH_PIN_OFFSET(th_constraint_vtable, clone, 56);
TH_PIN_OFFSET(th_constraint_vtable, free_state, 64);
TH_PIN_OFFSET(th_constraint_vtable, advance, 72);
TH_PIN_OFFSET(th_constraint_vtable, masks, 80);

int main(void) {
  printf("ABI %d.%d: layout of every struct matches the pins\n", TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR);
  return 0;
}
