// image_actions.js — Open / Save / Copy Image in the node menu of any node that shows an
// image (SaveImage and PreviewImage results, LoadImage's file, a sampler's live preview),
// as ComfyUI offers them. Open shows the image in a new tab; Save downloads it under its
// own file name; Copy puts it on the clipboard as PNG (the clipboard takes no JPEG, so a
// preview frame is redrawn into a PNG first).

// The image a node shows now: the live preview while there is one, else its first image.
export function shownImage(node) {
  const img = node.previewImg || (node.imgs || []).find((i) => i && i.complete && i.naturalWidth);
  return img && img.naturalWidth ? img : null;
}

function fileName(img) {
  try {
    const u = new URL(img.src, location.href);
    return u.searchParams.get("filename") || "preview.png";
  } catch { return "image.png"; }
}

export function openImage(img) { return window.open(img.src, "_blank"); }

export function saveImage(img) {
  const a = document.createElement("a");
  a.href = img.src;
  a.download = fileName(img);
  document.body.appendChild(a); a.click(); a.remove();
}

export async function copyImage(img) {
  const c = document.createElement("canvas");
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  c.getContext("2d").drawImage(img, 0, 0);
  const blob = await new Promise((res) => c.toBlob(res, "image/png"));
  await navigator.clipboard.write([new ClipboardItem({ "image/png": blob })]);
}

// Entries for litegraph's node menu (null when the node shows no image).
export function imageMenuOptions(node) {
  const img = shownImage(node);
  if (!img) return null;
  const report = (p) => Promise.resolve(p).catch((e) => window.app.showError(`image action failed: ${e.message || e}`));
  return [
    { content: "Open Image", callback: () => openImage(img) },
    { content: "Save Image", callback: () => saveImage(img) },
    { content: "Copy Image", callback: () => report(copyImage(img).then(() => window.app.setStatus("image copied", 4000))) },
  ];
}
