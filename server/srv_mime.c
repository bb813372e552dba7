/*
 * srv_mime — see srv_mime.h.
 */
#include "srv_mime.h"

#include <string.h>
#include <strings.h>

const char *srv_mime_type(const char *name)
{
    static const char *const map[][2] = {
        {".png", "image/png"},        {".jpg", "image/jpeg"},       {".jpeg", "image/jpeg"},
        {".webp", "image/webp"},      {".gif", "image/gif"},        {".bmp", "image/bmp"},
        {".tif", "image/tiff"},       {".tiff", "image/tiff"},      {".svg", "image/svg+xml"},
        {".ico", "image/x-icon"},     {".json", "application/json"}, {".txt", "text/plain"},
        {".html", "text/html"},       {".htm", "text/html"},        {".js", "text/javascript"},
        {".mjs", "text/javascript"},  {".css", "text/css"},         {".map", "application/json"},
        {".woff", "font/woff"},       {".woff2", "font/woff2"},     {".ttf", "font/ttf"},
        {".mp4", "video/mp4"},        {".webm", "video/webm"},      {".wav", "audio/wav"},
        {".mp3", "audio/mpeg"},       {".flac", "audio/flac"},      {".safetensors", "application/octet-stream"},
    };
    const char *dot = strrchr(name, '.');
    if (dot && !strchr(dot, '/'))
        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
            if (strcasecmp(dot, map[i][0]) == 0)
                return map[i][1];
    return "application/octet-stream";
}
