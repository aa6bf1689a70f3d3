#ifndef REWIND_CMICROHTTPD_SHIM_H
#define REWIND_CMICROHTTPD_SHIM_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Starts a daemon on a listening socket the caller bound (`listen_fd`, any family: a Unix socket works), one
/// thread per connection. MHD_start_daemon is variadic, which Swift cannot call; this fixes the options.
/// `connection_limit` is MHD's own hard limit (beyond it MHD closes connections without a reply),
/// `timeout_seconds` the idle timeout, `memory_limit` the per-connection memory (bounds the request line and
/// headers). Returns NULL when the daemon cannot start.
static inline struct MHD_Daemon *rewind_mhd_start(
    int listen_fd, unsigned int connection_limit, unsigned int timeout_seconds, size_t memory_limit,
    MHD_AccessHandlerCallback handler, void *handler_context, MHD_RequestCompletedCallback completed,
    MHD_NotifyConnectionCallback notify) {
    return MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC, 0, NULL, NULL, handler,
        handler_context, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd, MHD_OPTION_CONNECTION_LIMIT,
        connection_limit, MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        memory_limit, MHD_OPTION_NOTIFY_COMPLETED, completed, handler_context, MHD_OPTION_NOTIFY_CONNECTION, notify,
        handler_context, MHD_OPTION_END);
}
#endif
