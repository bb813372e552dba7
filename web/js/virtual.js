// virtual.js — frontend-only node types that ComfyUI workflows contain but no server runs:
// Reroute (a pass-through dot), Note / MarkdownNote (comments) and the legacy PrimitiveNode
// (a widget value fed into other nodes' converted widgets). They never appear in the API
// prompt: workflow.js resolves links through them. Registered only when the server has no
// class of the same name.
import { addMultilineWidget } from "./nodes.js";

const LG = window.LiteGraph;

function register(name, cls, category) {
  if (LG.registered_node_types[name] && !LG.registered_node_types[name].isVirtual) return;
  cls.isVirtual = true;
  LG.registerNodeType(name, cls);
  cls.category = category;
}

export function registerVirtualNodes(objectInfo) {
  if (!objectInfo.Reroute) {
    class Reroute extends LG.LGraphNode {
      constructor(title) {
        super(title || "Reroute");
        this.isVirtual = true;
        this.addInput("", "*");
        this.addOutput("", "*");
        this.size = [75, 26];
        this.serialize_widgets = true;
      }
      // Take on the type of what feeds it, so type checks downstream still hold.
      onConnectionsChange() {
        const link = this.inputs[0].link != null && this.graph ? this.graph.links[this.inputs[0].link] : null;
        const src = link && this.graph.getNodeById(link.origin_id);
        const type = (src && src.outputs[link.origin_slot]?.type) || "*";
        this.outputs[0].type = type;
        this.outputs[0].name = type === "*" ? "" : type;
        this.inputs[0].type = "*";
      }
    }
    Reroute.title = "Reroute";
    Reroute.collapsable = false;
    Reroute.title_mode = LG.NO_TITLE;
    register("Reroute", Reroute, "utils");
  }
  for (const name of ["Note", "MarkdownNote"]) {
    if (objectInfo[name]) continue;
    class Note extends LG.LGraphNode {
      constructor(title) {
        super(title || name);
        this.isVirtual = true;
        this.color = "#432"; this.bgcolor = "#653";
        this.serialize_widgets = true;
        addMultilineWidget(this, "text", "");
        this.size = [300, 110];
      }
    }
    Note.title = name;
    register(name, Note, "utils");
  }
  if (!objectInfo.PrimitiveNode) {
    // Legacy ComfyUI primitive: its output feeds converted widgets; its first saved widget
    // value is what those inputs receive.
    class PrimitiveNode extends LG.LGraphNode {
      constructor(title) {
        super(title || "Primitive");
        this.isVirtual = true;
        this.addOutput("connect to widget input", "*");
        this.serialize_widgets = true;
        this.size = [220, 60];
      }
      onConfigure(info) {
        this.savedWidgetValues = info.widgets_values || [];
        const v = this.savedWidgetValues[0];
        if (v !== undefined) this.addWidget(typeof v === "number" ? "number" : typeof v === "boolean" ? "toggle" : "text", "value", v, function (x) { this.value = x; }, typeof v === "number" ? { precision: Number.isInteger(v) ? 0 : 3, step: 10 } : {});
      }
      onSerialize(o) {
        const vals = (this.savedWidgetValues || []).slice();
        if (this.widgets && this.widgets[0]) vals[0] = this.widgets[0].value;
        o.widgets_values = vals;
      }
      primitiveValue() { return this.widgets && this.widgets[0] ? this.widgets[0].value : (this.savedWidgetValues || [])[0]; }
    }
    PrimitiveNode.title = "Primitive";
    register("PrimitiveNode", PrimitiveNode, "utils");
  }
}
