#include "op_test/op_test.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cache.h"
#include "core/str_cat.h"
#include "cpu/attention.h"
#include "cpu/cpu_cache.h"
#include "cpu/thread_pool.h"
#include "op_test/npy.h"
#include "program/file_bytes.h"

namespace kvcache::tools {

namespace {

using nlohmann::json;

struct LayerCall {
  int32_t layer = 0;
  NpyArray q, k, v;
  bool attend_only = false;  // the case gave no "k"/"v": the layer reads, CacheKernel::attend
};

struct Verb {
  std::string op;
  int32_t seq = 0, src = 0;
  std::optional<int64_t> upto;
  int64_t pos = 0;
};

struct Step {
  std::vector<Verb> verbs;
  std::optional<std::vector<int32_t>> seq_ids;
  std::optional<std::vector<int64_t>> positions;
  std::vector<LayerCall> layers;
  int32_t n_tokens = 0;
};

struct Case {
  std::string kind;
  CacheGeometry geometry;
  CacheConfig config;
  std::vector<int32_t> q_heads;
  std::vector<std::vector<float>> sinks;  // per cache layer: q_heads logits, empty = no sinks
  std::optional<float> scale;
  float softcap = 0.0f;
  std::vector<Step> steps;
};

// An integer field outside its type's range (or not an integer); thrown by int_of and turned
// into InvalidArgument at the parser's boundary (parse_case), like nlohmann's own errors.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `x` as T, refusing non-integers and values T cannot hold (no silent truncation).
template <class T>
T int_of(const json& x, const char* what) {
  const bool fits = x.is_number_integer() &&
                    (x.is_number_unsigned()
                         ? x.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                         : x.get<int64_t>() >= std::numeric_limits<T>::min() &&
                               x.get<int64_t>() <= std::numeric_limits<T>::max());
  if (!fits)
    throw FieldError(str_cat("\"", what, "\" must be an integer in [",
                             std::numeric_limits<T>::min(), ", ", std::numeric_limits<T>::max(),
                             "]"));
  return static_cast<T>(x.get<int64_t>());
}

// Malformed-case errors carry "op-test: <where>: <what>".
struct Malformed {
  std::string where;
  Status bad(const std::string& what) const {
    return invalid_argument("op-test: " + where + ": " + what);
  }
};

Status parse_verb(const json& j, const std::string& kind, const Malformed& at, Verb& v) {
  if (!j.is_object() || !j.contains("op") || !j["op"].is_string())
    return at.bad("expected an object with a string \"op\"");
  v.op = j["op"].get<std::string>();
  auto need = [&](const char* key) -> bool { return j.contains(key) && j[key].is_number_integer(); };
  if (v.op == "seq_new" || v.op == "clear") return ok_status();
  if (v.op == "seq_clone") {
    if (!need("src")) return at.bad("seq_clone needs an integer \"src\"");
    v.src = int_of<int32_t>(j["src"], "src");
    if (j.contains("upto") && !j["upto"].is_null()) {
      if (!need("upto")) return at.bad("seq_clone \"upto\" must be an integer or null");
      v.upto = int_of<int64_t>(j["upto"], "upto");
    }
    return ok_status();
  }
  if (v.op == "seq_rm") {
    if (!need("seq")) return at.bad("seq_rm needs an integer \"seq\"");
    v.seq = int_of<int32_t>(j["seq"], "seq");
    return ok_status();
  }
  if (v.op == "rewind") {
    if (!need("pos")) return at.bad("rewind needs an integer \"pos\"");
    v.pos = int_of<int64_t>(j["pos"], "pos");
    if (j.contains("seq")) {
      if (!need("seq")) return at.bad("rewind \"seq\" must be an integer");
      v.seq = int_of<int32_t>(j["seq"], "seq");
    } else if (kind == "cell") {
      return at.bad("rewind needs an integer \"seq\" for the cell kind");
    }
    return ok_status();
  }
  return at.bad("unknown op '" + v.op + "', expected seq_new, seq_clone, seq_rm, rewind or clear");
}

Status expect_shape(const NpyArray& a, const std::string& what, std::vector<int64_t> want,
                    const Malformed& at) {
  if (a.shape == want) return ok_status();
  auto str = [](const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) {
      if (i) r += ',';
      r += str_cat(s[i]);
    }
    return r + "]";
  };
  return at.bad(str_cat(what, " has shape ", str(a.shape), ", expected ", str(want)));
}

Status load_array(const std::filesystem::path& dir, const json& name, const Malformed& at,
                  NpyArray& out) {
  if (!name.is_string()) return at.bad("array file names must be strings");
  const std::string file = name.get<std::string>();
  if (file.empty() || file.find("..") != std::string::npos || file.front() == '/')
    return at.bad("array file '" + file + "' must be a plain name inside the case directory");
  Result<NpyArray> r = read_npy(dir / file, dir);
  if (!r.ok()) return Status(r.status().code(), "op-test: " + at.where + ": " + r.status().message());
  out = std::move(r).value();
  return ok_status();
}

Status parse_layer(const json& j, const Case& c, const std::filesystem::path& dir,
                   const Malformed& at, LayerCall& call, int32_t& n_tokens) {
  if (!j.is_object() || !j.contains("layer") || !j["layer"].is_number_integer())
    return at.bad("expected an object with an integer \"layer\"");
  call.layer = int_of<int32_t>(j["layer"], "layer");
  const auto n_layers = static_cast<int32_t>(c.geometry.layers.size());
  if (call.layer < 0 || call.layer >= n_layers)
    return at.bad(str_cat("layer = ", call.layer, ", expected in [0, ", n_layers, ")"));
  if (!j.contains("q")) return at.bad("missing \"q\"");
  if (j.contains("k") != j.contains("v")) return at.bad("give both \"k\" and \"v\" or neither");
  KVCACHE_RETURN_IF_ERROR(load_array(dir, j["q"], at, call.q));
  if (call.q.shape.size() != 3) return at.bad("q must be 3-D [T, q_heads, head_dim]");
  const int64_t T = call.q.shape[0];
  if (T <= 0 || T > (int64_t{1} << 24)) return at.bad(str_cat("q has T = ", T));
  if (n_tokens != 0 && T != n_tokens)
    return at.bad(str_cat("q has T = ", T, ", expected the step's ", n_tokens));
  n_tokens = static_cast<int32_t>(T);
  const LayerGeometry& l = c.geometry.layers[call.layer];
  KVCACHE_RETURN_IF_ERROR(expect_shape(call.q, "q", {T, c.q_heads[call.layer], l.head_dim}, at));
  // The output [T, q_heads, value_dim] is sized by the geometry, not by a file: bound it here.
  constexpr int64_t kMaxOutputFloats = int64_t{1} << 28;  // 1 GiB of float32
  if (int64_t{c.q_heads[call.layer]} * l.value_dim > kMaxOutputFloats / T)
    return at.bad(str_cat("the output [", T, ", ", c.q_heads[call.layer], ", ", l.value_dim,
                          "] would exceed ", kMaxOutputFloats * 4, " bytes"));
  call.attend_only = !j.contains("k");
  if (j.contains("k")) {
    KVCACHE_RETURN_IF_ERROR(load_array(dir, j["k"], at, call.k));
    KVCACHE_RETURN_IF_ERROR(load_array(dir, j["v"], at, call.v));
    KVCACHE_RETURN_IF_ERROR(expect_shape(call.k, "k", {T, l.kv_heads, l.head_dim}, at));
    KVCACHE_RETURN_IF_ERROR(expect_shape(call.v, "v", {T, l.kv_heads, l.value_dim}, at));
  }
  return ok_status();
}

template <class T>
Status int_list(const json& j, const char* key, const Malformed& at, std::optional<std::vector<T>>& out) {
  if (!j.contains(key) || j[key].is_null()) return ok_status();
  if (!j[key].is_array()) return at.bad(std::string("\"") + key + "\" must be an array of integers");
  std::vector<T> v;
  for (const json& x : j[key]) {
    if (!x.is_number_integer()) return at.bad(std::string("\"") + key + "\" must hold integers");
    v.push_back(int_of<T>(x, key));
  }
  out = std::move(v);
  return ok_status();
}

Status parse_step(const json& j, const Case& c, const std::filesystem::path& dir, size_t index,
                  Step& s) {
  const Malformed at{str_cat("steps[", index, "]")};
  if (!j.is_object()) return at.bad("expected an object");
  if (j.contains("verbs")) {
    if (!j["verbs"].is_array()) return at.bad("\"verbs\" must be an array");
    for (size_t i = 0; i < j["verbs"].size(); ++i) {
      Verb v;
      KVCACHE_RETURN_IF_ERROR(
          parse_verb(j["verbs"][i], c.kind, {str_cat(at.where, ".verbs[", i, "]")}, v));
      s.verbs.push_back(v);
    }
  }
  KVCACHE_RETURN_IF_ERROR(int_list(j, "seq_ids", at, s.seq_ids));
  KVCACHE_RETURN_IF_ERROR(int_list(j, "positions", at, s.positions));
  if (j.contains("layers")) {
    if (!j["layers"].is_array()) return at.bad("\"layers\" must be an array");
    for (size_t i = 0; i < j["layers"].size(); ++i) {
      LayerCall call;
      KVCACHE_RETURN_IF_ERROR(parse_layer(
          j["layers"][i], c, dir, {str_cat(at.where, ".layers[", i, "]")}, call, s.n_tokens));
      s.layers.push_back(std::move(call));
    }
  }
  if (s.layers.empty() && (s.seq_ids || s.positions))
    return at.bad("\"seq_ids\"/\"positions\" given without \"layers\"");
  if (s.seq_ids && static_cast<int64_t>(s.seq_ids->size()) != s.n_tokens)
    return at.bad(
        str_cat("seq_ids has ", s.seq_ids->size(), " entries, expected T = ", s.n_tokens));
  if (s.positions && static_cast<int64_t>(s.positions->size()) != s.n_tokens)
    return at.bad(
        str_cat("positions has ", s.positions->size(), " entries, expected T = ", s.n_tokens));
  return ok_status();
}

Status parse_header(const json& j, Case& c) {
  const Malformed at{"case.json"};
  if (!j.is_object()) return at.bad("expected a JSON object");
  if (!j.contains("kind") || !j["kind"].is_string()) return at.bad("missing string \"kind\"");
  c.kind = j["kind"].get<std::string>();
  if (c.kind != kSequenceKind && c.kind != kCellKind)
    return at.bad("unknown kind '" + c.kind + "', expected 'sequence' or 'cell'");
  if (!j.contains("geometry") || !j["geometry"].is_array() || j["geometry"].empty())
    return at.bad("\"geometry\" must be a non-empty array of layers");
  for (const json& l : j["geometry"]) {
    if (!l.is_object()) return at.bad("geometry entries must be objects");
    LayerGeometry g;
    g.kv_heads = int_of<int32_t>(l.at("kv_heads"), "kv_heads");
    g.head_dim = int_of<int32_t>(l.at("head_dim"), "head_dim");
    g.value_dim = l.contains("value_dim") ? int_of<int32_t>(l["value_dim"], "value_dim") : g.head_dim;
    g.window = l.contains("window") ? int_of<int32_t>(l["window"], "window") : 0;
    std::vector<float> sinks;
    if (l.contains("sinks")) {
      // Attention sinks: the layer's flag and its logits, one per query head.
      if (!l["sinks"].is_array() || l["sinks"].empty())
        return at.bad(str_cat("geometry[", c.geometry.layers.size(),
                              "].sinks must be a non-empty array of numbers (one per q head)"));
      for (const json& x : l["sinks"]) {
        const double v = x.is_number() ? x.get<double>() : NAN;
        if (!std::isfinite(v) || std::fabs(v) > 1e30)
          return at.bad(str_cat("geometry[", c.geometry.layers.size(),
                                "].sinks entries must be finite numbers"));
        sinks.push_back(static_cast<float>(v));
      }
      g.sinks = true;
    }
    c.geometry.layers.push_back(g);
    c.sinks.push_back(std::move(sinks));
  }
  const json& cfg = j.at("config");
  c.config.capacity = int_of<int64_t>(cfg.at("capacity"), "capacity");
  // kv_dtype sets K and V; k_dtype / v_dtype override one of them.
  for (const char* field : {"kv_dtype", "k_dtype", "v_dtype"}) {
    if (!cfg.contains(field)) continue;
    if (!cfg[field].is_string()) return at.bad(std::string(field) + " must be a string");
    const std::string name = cfg[field].get<std::string>();
    const std::optional<DType> dt = parse_dtype(name);
    if (!dt)
      return at.bad(str_cat("unknown ", field, " '", name, "', expected ", kDTypeNames));
    if (field[0] == 'k' && field[1] == 'v') c.config.kv_dtype = *dt;  // kv_dtype
    else if (field[0] == 'k') c.config.k_dtype = *dt;
    else c.config.v_dtype = *dt;
  }
  if (cfg.contains("kv_rotate")) {
    if (!cfg["kv_rotate"].is_boolean()) return at.bad("kv_rotate must be true or false");
    c.config.kv_rotate = cfg["kv_rotate"].get<bool>();
  }
  c.config.initial_capacity =
      cfg.contains("initial_capacity") ? int_of<int64_t>(cfg["initial_capacity"], "initial_capacity") : 0;
  if (cfg.contains("max_write") && !cfg["max_write"].is_null())
    c.config.max_write = int_of<int32_t>(cfg["max_write"], "max_write");
  if (cfg.contains("max_seqs") && !cfg["max_seqs"].is_null()) {
    // Only the cell layout has sequence ids; a bound the sequence layout would ignore is refused.
    if (c.kind != kCellKind) return at.bad("\"max_seqs\" applies to the cell kind only");
    c.config.max_seqs = int_of<int32_t>(cfg["max_seqs"], "max_seqs");
  }
  KVCACHE_RETURN_IF_ERROR(validate(c.geometry, c.config, "op-test: case.json"));
  const json& qh = j.at("q_heads");
  if (!qh.is_array() || qh.size() != c.geometry.layers.size())
    return at.bad(str_cat("\"q_heads\" must hold one integer per cache layer (",
                          c.geometry.layers.size(), ")"));
  for (const json& x : qh) {
    const int32_t h = int_of<int32_t>(x, "q_heads");
    if (h < 1 || h > (1 << 16)) return at.bad("q_heads entries must be in [1, 65536]");
    const size_t i = c.q_heads.size();
    if (c.geometry.layers[i].sinks && c.sinks[i].size() != static_cast<size_t>(h))
      return at.bad(str_cat("geometry[", i, "].sinks has ", c.sinks[i].size(),
                            " entries, expected q_heads[", i, "] = ", h));
    c.q_heads.push_back(h);
  }
  if (j.contains("scale") && !j["scale"].is_null()) {
    const double scale = j["scale"].get<double>();
    if (!std::isfinite(scale) || std::fabs(scale) > 1e30)
      return at.bad("\"scale\" must be a finite number");
    c.scale = static_cast<float>(scale);
  }
  const double softcap = j.value("softcap", 0.0);
  if (!std::isfinite(softcap) || softcap < 0.0 || softcap > 1e30)
    return at.bad("\"softcap\" must be a finite number >= 0");
  c.softcap = static_cast<float>(softcap);
  return ok_status();
}

Status parse_case(const std::filesystem::path& dir, Case& c) {
  const std::filesystem::path file = dir / "case.json";
  Result<std::string> text = read_file(file.string(), {"op-test", file_limits::kJson, dir.string()});
  if (!text.ok()) return text.status();
  try {
    const json j = json::parse(*text);
    KVCACHE_RETURN_IF_ERROR(parse_header(j, c));
    if (!j.contains("steps") || !j["steps"].is_array())
      return invalid_argument("op-test: case.json: \"steps\" must be an array");
    for (size_t i = 0; i < j["steps"].size(); ++i) {
      Step s;
      KVCACHE_RETURN_IF_ERROR(parse_step(j["steps"][i], c, dir, i, s));
      c.steps.push_back(std::move(s));
    }
  } catch (const json::exception& e) {
    return invalid_argument("op-test: '" + file.string() + "': " + e.what());
  } catch (const FieldError& e) {
    return invalid_argument("op-test: '" + file.string() + "': " + e.what());
  }
  return ok_status();
}

json run_verb(CacheControl& cache, const Verb& v) {
  if (v.op == "seq_new") {
    Result<int32_t> r = cache.seq_new();
    return r.ok() ? json(*r) : json(nullptr);
  }
  if (v.op == "seq_clone") {
    Result<int32_t> r = cache.seq_clone(v.src, v.upto);
    return r.ok() ? json(*r) : json(nullptr);
  }
  if (v.op == "seq_rm") return cache.seq_rm(v.seq).ok();
  if (v.op == "rewind") return cache.rewind(v.seq, v.pos).ok();
  cache.clear();
  return true;
}

// Declares and runs the step's layers; outputs[i] gets layer call i's result.
Status run_tokens(Cache& cache, const Case& c, const Step& s,
                  std::vector<std::vector<float>>& outputs) {
  const int32_t T = s.n_tokens;
  const std::vector<int32_t> ids = s.seq_ids ? *s.seq_ids : std::vector<int32_t>(T, 0);
  std::vector<int64_t> positions;
  if (s.positions) {
    positions = *s.positions;
  } else {  // each token continues its sequence
    std::map<int32_t, int64_t> next;
    for (int32_t id : ids) {
      auto [it, fresh] = next.try_emplace(id, cache.pos(id));
      positions.push_back(it->second++);
    }
  }
  // Check every call before declaring, so a refusal leaves the cache as it was.
  std::vector<AttendArgs> args(s.layers.size());
  std::vector<cpu::AttendOp> ops(s.layers.size());
  std::vector<bool> written(c.geometry.layers.size(), false);
  outputs.resize(s.layers.size());
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const LayerCall& call = s.layers[i];
    const LayerGeometry& l = c.geometry.layers[call.layer];
    outputs[i].assign(static_cast<size_t>(T) * std::max(0, c.q_heads[call.layer]) * l.value_dim, 0.0f);
    args[i] = AttendArgs{call.layer, T, c.q_heads[call.layer], positions, call.q.data,
                         call.k.data, call.v.data,
                         c.scale ? *c.scale : 1.0f / std::sqrt(static_cast<float>(l.head_dim)),
                         c.softcap, outputs[i], c.sinks[call.layer]};
    ops[i] = call.attend_only ? cpu::AttendOp::kAttendOnly : cpu::AttendOp::kUpdateAndAttend;
    KVCACHE_RETURN_IF_ERROR(cpu::check_attend_args(c.geometry, args[i], ops[i]));
    const std::string at = str_cat("op-test: layers[", i, "] (layer ", call.layer, "): ");
    const bool writes = ops[i] == cpu::AttendOp::kUpdateAndAttend;
    if (!writes && !written[call.layer])
      return failed_precondition(at + "attend only needs the layer written earlier in the step");
    if (writes && written[call.layer])
      return failed_precondition(at + "the layer is already written in this step");
    if (writes) written[call.layer] = true;
  }
  KVCACHE_RETURN_IF_ERROR(cache.declare_step(ids));
  for (size_t i = 0; i < args.size(); ++i)
    KVCACHE_RETURN_IF_ERROR(ops[i] == cpu::AttendOp::kAttendOnly ? cache.attend(args[i])
                                                                 : cache.update_and_attend(args[i]));
  return ok_status();
}

}  // namespace

Status run_op_test(const std::filesystem::path& case_dir, const std::filesystem::path& out_dir,
                   const OpTestOptions& options) {
  Case c;
  KVCACHE_RETURN_IF_ERROR(parse_case(case_dir, c));
  if (options.max_cache_bytes > 0) {
    const int64_t per_cell = bytes_per_cell(c.geometry, c.config).value_or(0);
    if (per_cell <= 0 || c.config.capacity > options.max_cache_bytes / per_cell)
      return resource_exhausted(str_cat("op-test: the cache at capacity ", c.config.capacity,
                                        " would need more than ", options.max_cache_bytes,
                                        " bytes"));
  }
  KVCACHE_RETURN_IF_ERROR(cpu::register_builders());
  Result<std::shared_ptr<Cache>> built =
      CacheFactory::global().build(kCpuBackend, c.kind, c.geometry, c.config);
  if (!built.ok()) return built.status();
  Cache& cache = **built;
  if (options.threads > 0) cpu::set_global_threads(options.threads);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return not_found("op-test: cannot create '" + out_dir.string() + "': " + ec.message());
  json steps = json::array();
  for (size_t si = 0; si < c.steps.size(); ++si) {
    const Step& s = c.steps[si];
    json verbs = json::array();
    for (const Verb& v : s.verbs) verbs.push_back(run_verb(cache, v));
    json entry = {{"ok", true}, {"verbs", verbs}, {"error", nullptr}};
    if (!s.layers.empty()) {
      std::vector<std::vector<float>> outputs;
      Status st = run_tokens(cache, c, s, outputs);
      if (!st.ok()) {
        entry["ok"] = false;
        entry["error"] = {{"code", std::string(to_string(st.code()))}, {"message", st.message()}};
      } else {
        std::map<int32_t, int> seen;  // a layer listed again (attend only) gets a suffix
        for (size_t i = 0; i < s.layers.size(); ++i) {
          const LayerCall& call = s.layers[i];
          const int again = seen[call.layer]++;
          const int64_t shape[3] = {s.n_tokens, c.q_heads[call.layer],
                                    c.geometry.layers[call.layer].value_dim};
          const std::string name = again > 0
                                       ? str_cat("s", si, "_l", call.layer, '_', again, ".npy")
                                       : str_cat("s", si, "_l", call.layer, ".npy");
          KVCACHE_RETURN_IF_ERROR(write_npy(out_dir / name, shape, outputs[i]));
        }
      }
    }
    steps.push_back(entry);
  }
  std::ofstream f(out_dir / "result.json");
  f << json{{"steps", steps}}.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  if (!f) return data_loss("op-test: writing '" + (out_dir / "result.json").string() + "' failed");
  return ok_status();
}

}  // namespace kvcache::tools
