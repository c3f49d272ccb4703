// Cache summary: numbers first (JSON), text rendered from the same numbers.
#include "program/cache_summary.h"

#include <cstdio>
#include <map>

#include "core/str_cat.h"

namespace kvcache {
namespace {

// An empty layer_cache means "every model layer owns its cache layer".
ModelGeometry normalized(const ModelGeometry& g) {
  ModelGeometry n = g;
  if (n.layer_cache.empty())
    for (size_t i = 0; i < n.cache.layers.size(); ++i)
      n.layer_cache.push_back(static_cast<int32_t>(i));
  return n;
}

std::string policy_name(int32_t window) {
  return window > 0 ? str_cat("sliding(", window, ")") : "full";
}

}  // namespace

int64_t summary_capacity(const SummaryOptions& o) {
  if (o.config.capacity > 0) return o.config.capacity;
  auto c = checked_mul(o.sessions, o.session_tokens);
  return c ? *c : 0;
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return str_cat(bytes, " B");
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string policy_groups(const ModelGeometry& geometry) {
  const ModelGeometry g = normalized(geometry);
  int64_t full = 0;
  std::map<int32_t, int64_t> sliding;  // window -> model layers
  for (int32_t c : g.layer_cache) {
    if (c < 0 || c >= static_cast<int32_t>(g.cache.layers.size())) continue;
    const int32_t w = g.cache.layers[static_cast<size_t>(c)].window;
    if (w > 0) ++sliding[w];
    else ++full;
  }
  std::string s = str_cat(g.layer_cache.size(), " layers: ");
  bool first = true;
  if (full > 0 || sliding.empty()) {
    s += str_cat(full, " full");
    first = false;
  }
  for (auto it = sliding.rbegin(); it != sliding.rend(); ++it) {
    s += str_cat((first ? "" : " + "), it->second, " sliding(",
                 it->first, ")");
    first = false;
  }
  return s;
}

nlohmann::json cache_summary_json(const ModelGeometry& geometry, const SummaryOptions& options) {
  using nlohmann::json;
  const ModelGeometry g = normalized(geometry);
  CacheConfig config = options.config;
  config.capacity = summary_capacity(options);
  if (Status s = validate_model_geometry(g); !s.ok()) return json{{"error", s.message()}};
  if (auto why = why_invalid(g.cache, config))
    return json{{"error", "cache config: " + why->message()}};
  if (options.kind != "cell" && options.kind != "sequence")
    return json{{"error", "kind = '" + options.kind + "', expected cell or sequence"}};
  if (options.sessions <= 0)
    return json{{"error", str_cat("sessions = ", options.sessions, ", expected > 0")}};

  const DType kt = config.key_type(), vt = config.value_type();
  json layers = json::array();
  std::vector<std::vector<int32_t>> readers(g.cache.layers.size());
  for (size_t i = 0; i < g.layer_cache.size(); ++i)
    readers[static_cast<size_t>(g.layer_cache[i])].push_back(static_cast<int32_t>(i));
  for (size_t c = 0; c < g.cache.layers.size(); ++c) {
    const LayerGeometry& l = g.cache.layers[c];
    const int64_t per_cell = *bytes_per_cell(l, kt, vt);  // validated above: no overflow
    const int64_t slots = sequence_slots(l, config);
    layers.push_back({{"kv_heads", l.kv_heads},
                      {"head_dim", l.head_dim},
                      {"value_dim", l.value_dim},
                      {"window", l.window},
                      {"sinks", l.sinks},
                      {"bytes_per_cell", per_cell},
                      {"slots", slots},
                      {"model_layers", readers[c]}});
  }
  const int64_t per_cell = *bytes_per_cell(g.cache, kt, vt);
  const int64_t all_positions = per_cell * config.capacity;  // validated: fits
  int64_t checkpoint = 0;
  for (const LayerGeometry& l : g.cache.layers)
    if (l.window > 1) checkpoint += (l.window - 1) * *bytes_per_cell(l, kt, vt);
  // Both fit: at most all_positions, which fits (validated).
  const int64_t sequence_bytes = *sequence_bytes_at_capacity(g.cache, config);
  const int64_t at_capacity = *kv_bytes_at_capacity(options.kind, g.cache, config);
  json pools = json::array();
  if (options.kind == "cell") {
    for (const CellPool& p : cell_pools(g.cache, config)) {
      int64_t bytes = 0;
      for (int32_t l : p.layers) bytes += *bytes_per_cell(g.cache.layers[l], kt, vt) * p.cells;
      pools.push_back({{"window", p.window}, {"layers", p.layers}, {"cells", p.cells},
                       {"bytes", bytes}});  // <= all_positions: no overflow
    }
  }
  const int64_t session_tokens =
      options.session_tokens > 0 ? options.session_tokens : config.capacity / options.sessions;
  auto per_session = checked_mul(per_cell, session_tokens);
  json out = {{"layers", layers},
              {"layer_cache", g.layer_cache},
              {"n_layers", g.layer_cache.size()},
              {"n_caches", g.cache.layers.size()},
              {"groups", policy_groups(g)},
              {"kv_dtype", kt == vt ? std::string(to_string(kt))
                                    : str_cat("k=", to_string(kt), ",v=", to_string(vt))},
              {"k_dtype", std::string(to_string(kt))},
              {"v_dtype", std::string(to_string(vt))},
              {"kv_rotate", config.rotated()},
              // The same cells in f16, for the memory a K/V type saves (fits: f16 <= f32).
              {"bytes_per_cell_f16", *bytes_per_cell(g.cache, DType::kF16)},
              {"capacity", config.capacity},
              {"sessions", options.sessions},
              {"session_tokens", session_tokens},
              {"bytes_per_cell", per_cell},
              {"kind", options.kind},
              {"bytes_at_capacity", at_capacity},
              {"bytes_per_session", per_session ? json(*per_session) : json(nullptr)},
              {"all_positions_bytes_at_capacity", all_positions},
              {"sequence_bytes_at_capacity", sequence_bytes},
              {"sliding_saving_bytes", all_positions - sequence_bytes},
              {"checkpoint_bytes", checkpoint}};
  if (options.kind == "cell") {
    out["pools"] = pools;
    out["max_seqs"] = cell_max_seqs(config);
  }
  if (options.kv_memory)
    out["kv_memory"] = {{"budget", *options.kv_memory},
                        {"bytes", at_capacity},
                        {"capacity", config.capacity},
                        {"sessions", options.sessions}};
  if (g.max_context > 0) out["max_context"] = g.max_context;
  if (g.max_step_tokens > 0) out["max_step_tokens"] = g.max_step_tokens;
  if (config.max_write) out["max_write"] = *config.max_write;
  return out;
}

std::string cache_summary_text(const ModelGeometry& geometry, const SummaryOptions& options) {
  const nlohmann::json j = cache_summary_json(geometry, options);
  if (j.contains("error")) return "cache summary: " + j["error"].get<std::string>() + "\n";
  std::string s;
  char line[256];
  s += str_cat("cache: ", j["groups"].get<std::string>(), ", ",
               j["n_caches"].get<int64_t>(), " cache layers\n");
  s += str_cat("kv dtype ", j["kv_dtype"].get<std::string>(), ", capacity ",
               j["capacity"].get<int64_t>(), " cells (",
               j["sessions"].get<int64_t>(), " session(s) x ",
               j["session_tokens"].get<int64_t>(), " tokens)\n");
  const auto per_cell = j["bytes_per_cell"].get<int64_t>();
  const auto f16_cell = j["bytes_per_cell_f16"].get<int64_t>();
  std::snprintf(line, sizeof line, "K/V bytes per cell %lld = %.3fx f16 (%lld)\n\n",
                static_cast<long long>(per_cell), double(per_cell) / double(f16_cell),
                static_cast<long long>(f16_cell));
  s += line;
  std::snprintf(line, sizeof line, "%5s  %-16s %8s %8s %9s %-14s %12s %10s %6s\n", "cache",
                "model layers", "kv_heads", "head_dim", "value_dim", "policy", "bytes/cell",
                "seq slots", "sinks");
  s += line;
  for (size_t c = 0; c < j["layers"].size(); ++c) {
    const auto& l = j["layers"][c];
    std::string readers;
    for (const auto& r : l["model_layers"]) {
      if (!readers.empty()) readers += ",";
      readers += str_cat(r.get<int32_t>());
    }
    if (readers.size() > 16) readers = readers.substr(0, 13) + "...";
    std::snprintf(line, sizeof line, "%5zu  %-16s %8d %8d %9d %-14s %12s %10lld %6s\n",
                  c, readers.c_str(),
                  l["kv_heads"].get<int32_t>(), l["head_dim"].get<int32_t>(),
                  l["value_dim"].get<int32_t>(), policy_name(l["window"].get<int32_t>()).c_str(),
                  human_bytes(l["bytes_per_cell"].get<int64_t>()).c_str(),
                  static_cast<long long>(l["slots"].get<int64_t>()),
                  l["sinks"].get<bool>() ? "yes" : "no");
    s += line;
  }
  const auto b = [&](const char* k) { return human_bytes(j[k].get<int64_t>()); };
  s += "\nbytes per cell (all layers): " + b("bytes_per_cell") + "\n";
  if (!j["bytes_per_session"].is_null()) s += "bytes per session: " + b("bytes_per_session") + "\n";
  s += "bytes at capacity, " + j["kind"].get<std::string>() + " layout: " +
       b("bytes_at_capacity") + "\n";
  if (j.contains("kv_memory")) {
    const auto& m = j["kv_memory"];
    s += str_cat("K/V memory budget ", human_bytes(m["budget"].get<int64_t>()), " bought ",
                 m["capacity"].get<int64_t>(), " cells (", m["sessions"].get<int64_t>(),
                 " session(s)) taking ", human_bytes(m["bytes"].get<int64_t>()), "\n");
  }
  if (j.contains("pools"))
    for (const auto& p : j["pools"]) {
      const int32_t w = p["window"].get<int32_t>();
      s += str_cat("  ", policy_name(w), " pool: ", p["layers"].size(),
                   " layers x ", p["cells"].get<int64_t>(), " cells = ",
                   human_bytes(p["bytes"].get<int64_t>()),
                   (w > 0 ? str_cat(" (", j["max_seqs"].get<int64_t>(),
                                    " sequences x (window - 1) + step, at most capacity)")
                  : ""), "\n");
    }
  s += "every position in every layer (no window savings): " +
       b("all_positions_bytes_at_capacity") + "\n";
  s += "one sequence at capacity, sequence layout (sliding layers keep rings): " +
       b("sequence_bytes_at_capacity") + "\n";
  s += "sliding windows save (sequence layout): " + b("sliding_saving_bytes") + "\n";
  if (j["checkpoint_bytes"].get<int64_t>() > 0)
    s += "undo checkpoint per interactive turn (window - 1 cells per sliding layer): " +
         b("checkpoint_bytes") + "\n";
  return s;
}

}  // namespace kvcache
