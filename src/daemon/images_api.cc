#include "daemon/images_api.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <optional>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "http/errors.h"
#include "http/stream_queue.h"
#include "image/reference.h"

namespace airlock::daemon {

using http::Exchange;
using http::Verb;
using nlohmann::json;
namespace asio = boost::asio;

namespace {

const Logger& Log() {
  static const Logger& log = GetLogger("daemon");
  return log;
}

const std::vector<store::SandboxState> kHoldingStates = {store::SandboxState::kAllocating,
                                                         store::SandboxState::kPreparingImage,
                                                         store::SandboxState::kMountingWorkspace,
                                                         store::SandboxState::kStarting,
                                                         store::SandboxState::kRunning,
                                                         store::SandboxState::kPaused,
                                                         store::SandboxState::kCollectingArtifacts,
                                                         store::SandboxState::kCleaning};

// Whether a live sandbox on this store names `digest`: one of `owner`'s, or of anyone's.
bool UsedBySandbox(store::Store* store, const image::Digest& digest,
                   const std::optional<std::string>& owner) {
  if (owner && owner->empty()) return false;  // the node's own: it has no sandboxes
  store::SandboxQuery q;
  if (owner) q.owner = ApiKeyId(*owner);
  q.states = kHoldingStates;
  q.limit = 1000;
  for (;;) {
    absl::StatusOr<store::SandboxPage> page = store->ListSandboxes(q);
    // When the store cannot say, the image counts as used: removing it could break a sandbox.
    if (!page.ok()) return true;
    for (const auto& s : page->sandboxes) {
      if (s.image_digest == digest.str()) return true;
    }
    if (page->next_cursor.empty()) return false;
    q.cursor = page->next_cursor;
  }
}

std::string StageName(image::ImportProgress::Stage s) {
  switch (s) {
    case image::ImportProgress::Stage::kReadingArchive:
      return "reading_archive";
    case image::ImportProgress::Stage::kVerifying:
      return "verifying";
    case image::ImportProgress::Stage::kUnpacking:
      return "unpacking";
    case image::ImportProgress::Stage::kDone:
      return "done";
  }
  return "";
}

std::string Sse(std::string_view event, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", event,
                     data.dump(-1, ' ', false, json::error_handler_t::replace));
}

// The reference of /v1/images/{r1}[/{r2}...]: the captured segments, joined.
std::string ReferenceOf(const Exchange& ex) {
  std::string ref;
  for (const char* k : {"r1", "r2", "r3", "r4"}) {
    auto it = ex.request().params.find(k);
    if (it == ex.request().params.end()) break;
    if (!ref.empty()) ref += '/';
    ref += it->second;
  }
  return ref;
}

// Removes an upload's temporary file whatever way the handler leaves.
struct TempFile {
  std::string path;
  UniqueFd fd;
  ~TempFile() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// The answer to a request: the JSON, or the error.
asio::awaitable<void> Reply(Exchange& ex, int status, const absl::StatusOr<json>& r) {
  if (!r.ok()) {
    co_await ex.RespondError(r.status());
  } else {
    co_await ex.RespondJson(status, *r);
  }
}

// An import's failure as the answer gives it: an archive over the store's limits is too large
// (413), not a rate limit.
absl::Status ImportError(const absl::Status& s) {
  absl::Status out = Annotate(s, "import");
  if (s.code() == absl::StatusCode::kResourceExhausted) {
    out = http::WithReason(out, http::Reason::kPayloadTooLarge);
  }
  return out;
}

// Imports `path` for `options.owner` within its quota (0: none). A key at its quota is refused
// before anything is unpacked; the store checks each image against the quota when it commits it
// (ImportOptions::max_owner_bytes), so a refused image leaves the key's images and tags as they
// were, whatever else imports at the same time.
absl::StatusOr<std::vector<image::ImageInfo>> ImportWithinQuota(image::ImageStore& images,
                                                                int64_t quota,
                                                                const std::string& path,
                                                                image::ImportOptions options) {
  if (quota > 0) {
    ASSIGN_OR_RETURN(int64_t used, images.HeldBytes(options.owner));
    if (used >= quota) {
      return ResourceExhausted(fmt::format(
          "image quota: this key's images take {} bytes, its limit is {} bytes", used, quota));
    }
  }
  options.max_owner_bytes = quota;
  absl::StatusOr<std::vector<image::ImageInfo>> got = images.Import(path, options);
  if (!got.ok() && got.status().message().find("image quota") != std::string_view::npos) {
    return ResourceExhausted(fmt::format(
        "{} (airlockd --max-image-bytes-per-key; remove some of this key's images first)",
        std::string(got.status().message())));
  }
  return got;
}

json ImagesJson(const std::vector<image::ImageInfo>& images) {
  json out = json::array();
  for (const auto& i : images) out.push_back(ImageJson(i));
  return json{{"images", out}};
}

}  // namespace

absl::StatusOr<std::unique_ptr<image::ImageStore>> OpenNodeImageStore(const std::string& data_dir,
                                                                      store::Store* store) {
  image::ImageStoreOptions o;
  o.dir = data_dir + "/images";
  // The sandboxes' uid 0 is host_id_base: image files get the ids the sandbox's users have.
  o.id_offset = engine::SandboxOptions{}.host_id_base;
  o.in_use = [store](const image::Digest& d, const std::optional<std::string>& owner) {
    return UsedBySandbox(store, d, owner);
  };
  return image::ImageStore::Open(std::move(o));
}

json ImageJson(const image::ImageInfo& info) {
  json layers = json::array();
  for (const auto& l : info.layers) layers.push_back(l.str());
  const image::ImageConfig& c = info.config;
  absl::Time imported = absl::FromChrono(info.imported);
  return {{"digest", info.digest.str()},
          {"tags", info.tags},
          {"node_image", info.node},
          {"config_digest", info.config_digest.str()},
          {"layers", layers},
          {"unpacked_bytes", info.unpacked_bytes},
          {"blob_bytes", info.blob_bytes},
          {"entries", info.entries},
          {"skipped_entries", info.skipped_entries},
          {"imported_at", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", imported, absl::UTCTimeZone())},
          {"config",
           {{"env", c.env},
            {"working_dir", c.working_dir},
            {"user", c.user},
            {"entrypoint", c.entrypoint},
            {"cmd", c.cmd},
            {"os", c.os},
            {"architecture", c.architecture},
            {"created", c.created}}}};
}

ImagesApi::ImagesApi(image::ImageStore* images, asio::any_io_executor pool,
                     ImagesApiOptions options)
    : images_(images), pool_(std::move(pool)), options_(std::move(options)) {}

void ImagesApi::AddRoutes(http::Router& r) {
  r.Add(Verb::post, "/v1/images", [this](Exchange& ex) { return Import(ex); },
        {.max_body_bytes = options_.max_upload_bytes, .stream_body = true});
  r.Add(Verb::get, "/v1/images", [this](Exchange& ex) { return List(ex); });
  // A reference may hold up to three slashes ("registry/team/name:tag"): one route per depth.
  // route: GET /v1/images/{ref}
  // route: DELETE /v1/images/{ref}
  for (std::string pattern = "/v1/images"; const char* seg : {"/{r1}", "/{r2}", "/{r3}", "/{r4}"}) {
    pattern += seg;
    r.Add(Verb::get, pattern, [this](Exchange& ex) { return Get(ex); });
    r.Add(Verb::delete_, pattern, [this](Exchange& ex) { return Remove(ex); });
  }
}

asio::awaitable<void> ImagesApi::Import(Exchange& ex) {
  std::vector<std::string> tags;
  for (const auto& [k, v] : ex.request().query) {
    if (k != "tag") {
      co_await ex.RespondError(InvalidArgument(fmt::format("unknown query parameter \"{}\"", k)));
      co_return;
    }
    absl::StatusOr<std::string> tag = image::NormalizeTag(v);
    if (!tag.ok()) {
      co_await ex.RespondError(Annotate(tag.status(), "tag"));
      co_return;
    }
    tags.push_back(*tag);
  }
  bool progress = ex.request().Header("Accept").find("text/event-stream") != std::string::npos;
  const std::string owner = ex.principal();

  auto file = std::make_shared<TempFile>();
  absl::Status opened = co_await http::RunBlocking(pool_, [&]() -> absl::Status {
    RETURN_IF_ERROR(MakeDirs(options_.upload_dir, 0700), "upload directory");
    std::string tmpl = options_.upload_dir + "/upload-XXXXXX";
    int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "create the upload's temporary file");
    file->path = tmpl;
    file->fd.Reset(fd);
    return absl::OkStatus();
  });
  if (!opened.ok()) {
    co_await ex.RespondError(opened);
    co_return;
  }
  int64_t received = 0;
  for (;;) {
    absl::StatusOr<std::string> chunk = co_await ex.ReadBodyChunk();
    if (!chunk.ok()) {
      co_await ex.RespondError(chunk.status());
      co_return;
    }
    if (chunk->empty()) break;
    received += static_cast<int64_t>(chunk->size());
    absl::Status written =
        co_await http::RunBlocking(pool_, [&] { return WriteAll(file->fd.get(), *chunk); });
    if (!written.ok()) {
      co_await ex.RespondError(Annotate(written, "store the uploaded archive"));
      co_return;
    }
  }
  if (received == 0) {
    co_await ex.RespondError(
        InvalidArgument("the body is empty: send an OCI layout or docker "
                        "save tarball"));
    co_return;
  }
  file->fd.Reset();
  Log().Info("image upload received", {{"bytes", received}});

  if (!progress) {
    absl::StatusOr<json> r = co_await http::RunBlocking(pool_, [&]() -> absl::StatusOr<json> {
      absl::StatusOr<std::vector<image::ImageInfo>> got = ImportWithinQuota(
          *images_, options_.max_image_bytes_per_key, file->path, {.tags = tags, .owner = owner});
      if (!got.ok()) return ImportError(got.status());
      return ImagesJson(*got);
    });
    co_await Reply(ex, 201, r);
    co_return;
  }

  // Progress as server-sent events: `progress` at each stage and every few MiB, then `result`
  // (the answer the plain form gives) or `error` (an error body).
  auto q = std::make_shared<http::StreamQueue<std::string>>(ex.executor(), 64);
  std::string request_id = ex.request().request_id;
  image::ImageStore* images = images_;
  const int64_t quota = options_.max_image_bytes_per_key;
  asio::post(pool_, [q, file, tags, owner, request_id, images, quota] {
    image::ImportOptions o;
    o.tags = tags;
    o.owner = owner;
    o.progress = [&q](const image::ImportProgress& p) {
      (void)q->Push(Sse("progress", {{"stage", StageName(p.stage)},
                                     {"layer", p.layer},
                                     {"layers", p.layers},
                                     {"bytes_read", p.bytes_read},
                                     {"bytes_written", p.bytes_written},
                                     {"entries", p.entries}}));
    };
    absl::StatusOr<std::vector<image::ImageInfo>> got =
        ImportWithinQuota(*images, quota, file->path, o);
    if (got.ok()) {
      q->Push(Sse("result", ImagesJson(*got)));
    } else {
      q->Push(Sse("error", http::ErrorBody(ImportError(got.status()), request_id)));
    }
    q->Close();
  });
  co_await http::StreamResponse(ex, 200, "text/event-stream", q);
}

asio::awaitable<void> ImagesApi::List(Exchange& ex) {
  if (!ex.request().query.empty()) {
    co_await ex.RespondError(InvalidArgument(
        fmt::format("unknown query parameter \"{}\"", ex.request().query.front().first)));
    co_return;
  }
  const std::string owner = ex.principal();
  absl::StatusOr<json> r = co_await http::RunBlocking(pool_, [&]() -> absl::StatusOr<json> {
    ASSIGN_OR_RETURN(std::vector<image::ImageInfo> list, images_->List(owner));
    return ImagesJson(list);
  });
  co_await Reply(ex, 200, r);
}

asio::awaitable<void> ImagesApi::Get(Exchange& ex) {
  std::string ref = ReferenceOf(ex);
  const std::string owner = ex.principal();
  absl::StatusOr<json> r = co_await http::RunBlocking(pool_, [&]() -> absl::StatusOr<json> {
    ASSIGN_OR_RETURN(image::Digest d, images_->Resolve(ref, owner));
    ASSIGN_OR_RETURN(image::ImageInfo info, images_->Get(d, owner));
    return ImageJson(info);
  });
  co_await Reply(ex, 200, r);
}

asio::awaitable<void> ImagesApi::Remove(Exchange& ex) {
  std::string ref = ReferenceOf(ex);
  const std::string owner = ex.principal();
  absl::StatusOr<json> r = co_await http::RunBlocking(pool_, [&]() -> absl::StatusOr<json> {
    ASSIGN_OR_RETURN(image::Digest d, images_->Resolve(ref, owner));
    RETURN_IF_ERROR(images_->Remove(d.str(), owner), fmt::format("remove image {}", ref));
    return json{{"digest", d.str()}, {"removed", true}};
  });
  co_await Reply(ex, 200, r);
}

}  // namespace airlock::daemon
