#include "http/response.h"

#include <microhttpd.h>
#include <stdlib.h>

/* struct http_response is libmicrohttpd's response under our name: the
 * routes never see the library, and no wrapper is allocated per reply. */
_Static_assert(HTTP_STREAM_END == MHD_CONTENT_READER_END_OF_STREAM, "stream end as libmicrohttpd's");
_Static_assert(HTTP_STREAM_ERROR == MHD_CONTENT_READER_END_WITH_ERROR, "stream error as libmicrohttpd's");
_Static_assert(HTTP_SIZE_UNKNOWN == MHD_SIZE_UNKNOWN, "unknown size as libmicrohttpd's");

static struct http_response *ours(struct MHD_Response *resp)
{
	return (struct http_response *)resp;
}

struct http_response *http_response_bytes(void *data, size_t len)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (!resp)
		free(data);
	return ours(resp);
}

struct http_response *http_response_static(const void *p, size_t len)
{
	return ours(MHD_create_response_from_buffer(len, (void *)p, MHD_RESPMEM_PERSISTENT));
}

struct http_response *http_response_fd(int fd, uint64_t offset, uint64_t len)
{
	return ours(MHD_create_response_from_fd_at_offset64(len, fd, offset));
}

struct http_response *http_response_stream(uint64_t size, size_t block, http_stream_fn read, void *ctx,
					   void (*done)(void *ctx))
{
	return ours(MHD_create_response_from_callback(size, block, read, ctx, done));
}

void http_response_header(struct http_response *resp, const char *name, const char *value)
{
	MHD_add_response_header((struct MHD_Response *)resp, name, value);
}

void http_response_free(struct http_response **resp)
{
	if (!resp || !*resp)
		return;
	MHD_destroy_response((struct MHD_Response *)*resp);
	*resp = NULL;
}
