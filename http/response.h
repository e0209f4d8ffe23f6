#pragma once
/* A response a handler builds before queueing it with http_reply_response
 * (http/req.h): its body (bytes, a file, or a stream a callback fills)
 * and its headers. The type is opaque: it is libmicrohttpd's response,
 * and only http/ sees the library. A constructor returns NULL when no
 * response can be made; headers that cannot be added are dropped. */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct http_response;

/* The size of a stream whose end only its callback knows (sent chunked). */
#define HTTP_SIZE_UNKNOWN UINT64_MAX
/* What a stream callback returns instead of a byte count: the body ended
 * whole, or it cannot be finished (the connection is cut, so a client of
 * a promised length sees a truncated body rather than a short success). */
#define HTTP_STREAM_END ((ssize_t)-1)
#define HTTP_STREAM_ERROR ((ssize_t)-2)

/* Fill buf with at most max bytes of the body from offset pos; the count,
 * or HTTP_STREAM_END / HTTP_STREAM_ERROR. Runs on the connection's thread
 * whenever it can send more. */
typedef ssize_t (*http_stream_fn)(void *ctx, uint64_t pos, char *buf, size_t max);

/* The len bytes of data, taken: freed with the response, or here when
 * none can be made. */
struct http_response *http_response_bytes(void *data, size_t len);
/* The len bytes at p, which outlive the response (static data). */
struct http_response *http_response_static(const void *p, size_t len);
/* len bytes of fd from offset (sent with sendfile where it can be); the
 * response owns fd once made (closed with it), NULL leaves it the caller's. */
struct http_response *http_response_fd(int fd, uint64_t offset, uint64_t len);
/* A body of size bytes (or HTTP_SIZE_UNKNOWN) that read fills, block
 * bytes at a time at most. ctx is read's; done(ctx) runs once when the
 * response is destroyed, which may be before or after the request's
 * completion. NULL: nothing was made and done is not called. */
struct http_response *http_response_stream(uint64_t size, size_t block, http_stream_fn read, void *ctx,
					   void (*done)(void *ctx));
/* Add the header name: value (both copied). */
void http_response_header(struct http_response *resp, const char *name, const char *value);
/* Destroy a response that was never queued, *resp set to NULL (NULL or
 * *resp NULL: nothing); a stream's done runs, an fd is closed. */
void http_response_free(struct http_response **resp);
