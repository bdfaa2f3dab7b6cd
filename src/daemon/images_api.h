// The node's image endpoints (docs/daemon.md, "Images"), served from the node's image store
// (image/image_store.h):
//
//   POST   /v1/images[?tag=NAME[:TAG]...]  body: an OCI layout tarball or a docker save tarball
//   GET    /v1/images                      every image, newest import first
//   GET    /v1/images/{ref}                one image by digest or tag
//   DELETE /v1/images/{ref}                409 while a live sandbox uses it
//
// A reference may hold slashes ("registry:5000/team/base:1"); the routes take up to four path
// segments after /v1/images/ and join them.
//
// An upload streams to a temporary file below the data directory (never whole in memory) and is
// imported from there; the file is removed afterwards whatever happens.
#ifndef AIRLOCK_DAEMON_IMAGES_API_H_
#define AIRLOCK_DAEMON_IMAGES_API_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/any_io_executor.hpp"
#include "http/server.h"
#include "image/image_store.h"
#include "nlohmann/json.hpp"
#include "store/store.h"

namespace airlock::daemon {

// Opens DIR/images, owned by this node: files belong to the engine's sandbox id range, and an
// image that a live sandbox in `store` names (image_digest) is in use, so Remove refuses it even
// for sandboxes a restarted daemon re-adopted. `store` must outlive the image store.
absl::StatusOr<std::unique_ptr<image::ImageStore>> OpenNodeImageStore(const std::string& data_dir,
                                                                      store::Store* store);

// The JSON of an image in API answers.
nlohmann::json ImageJson(const image::ImageInfo& info);

struct ImagesApiOptions {
  std::string upload_dir;                          // temporary files of uploads (created 0700)
  uint64_t max_upload_bytes = uint64_t{32} << 30;  // one archive
  // Bytes of images one key may hold (each image's unpacked files plus its blobs, counted for
  // every key holding it). An import that would end beyond it is refused (413) and leaves the
  // key's images as they were. 0: no limit. The node's own images do not count.
  int64_t max_image_bytes_per_key = int64_t{64} << 30;
};

// Thread-safe; the handlers run their blocking work on `pool`. `images` must outlive it.
class ImagesApi {
 public:
  ImagesApi(image::ImageStore* images, boost::asio::any_io_executor pool, ImagesApiOptions options);

  // Adds the routes above to `router`; they refer to this object, which must outlive the server.
  void AddRoutes(http::Router& router);

 private:
  boost::asio::awaitable<void> Import(http::Exchange& ex);
  boost::asio::awaitable<void> List(http::Exchange& ex);
  boost::asio::awaitable<void> Get(http::Exchange& ex);
  boost::asio::awaitable<void> Remove(http::Exchange& ex);

  image::ImageStore* images_;
  boost::asio::any_io_executor pool_;
  ImagesApiOptions options_;
};

}  // namespace airlock::daemon

#endif  // AIRLOCK_DAEMON_IMAGES_API_H_
