// The schema walker behind CheckMessageRules. The reflection data is turned
// once into a plan: per table, only the fields that can break a rule
// (strings, vectors, sub-tables, unions, required structs), with their rules
// read from the kvstash_* attributes. Walking a message then costs a few
// loads per such field.
#include "message_rules.h"

#include <flatbuffers/reflection_generated.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "kvstash/proto/kvstash_bfbs_generated.h"

namespace kvstash::proto::internal {
namespace {

enum class Kind {
  kString,
  kStruct,  // checked for presence only
  kTable,
  kUnion,
  kScalarVector,  // scalars and structs: length rules only
  kStringVector,
  kTableVector,
};

struct Rules {
  bool required = false;
  bool non_empty = false;
  uint32_t max_bytes = 0;  // 0: no limit
  uint32_t exact_len = 0;  // 0: any length
};

struct UnionMember {
  int object = -1;  // index into Plan::objects; -1: no such member
  std::string name;
};

struct FieldPlan {
  std::string name;
  Kind kind = Kind::kString;
  uint16_t offset = 0;               // vtable offset of the field
  uint16_t type_offset = 0;          // unions: vtable offset of the _type field
  int object = -1;                   // tables and table vectors: index into Plan::objects
  std::vector<UnionMember> members;  // unions: by type value
  Rules rules;
};

struct ObjectPlan {
  std::string name;
  std::vector<FieldPlan> fields;
};

struct Plan {
  std::vector<ObjectPlan> objects;
  int root = -1;
};

uint32_t AttributeNumber(const reflection::KeyValue& kv) {
  return kv.value() ? uint32_t(std::strtoul(kv.value()->c_str(), nullptr, 10)) : 0;
}

Rules ReadRules(const reflection::Field& field) {
  Rules rules;
  if (field.attributes() == nullptr) return rules;
  for (const reflection::KeyValue* kv : *field.attributes()) {
    const std::string key = kv->key()->str();
    if (key == "kvstash_required") rules.required = true;
    if (key == "kvstash_non_empty") rules.required = rules.non_empty = true;
    if (key == "kvstash_max_bytes") rules.max_bytes = AttributeNumber(*kv);
    if (key == "kvstash_len") rules.exact_len = AttributeNumber(*kv);
  }
  return rules;
}

// nullptr-free by construction: the embedded schema is ours, and a unit test
// walks every table of it.
Plan BuildPlan() {
  const reflection::Schema* schema = reflection::GetSchema(wire::EnvelopeBinarySchema::data());
  Plan plan;
  const auto& objects = *schema->objects();
  plan.objects.resize(objects.size());
  for (size_t o = 0; o < objects.size(); ++o) {
    const reflection::Object& object = *objects.Get(uint32_t(o));
    ObjectPlan& out = plan.objects[o];
    out.name = object.name()->str();
    if (out.name.rfind("kvstash.wire.", 0) == 0) out.name = out.name.substr(13);
    if (object.is_struct()) continue;  // inline bytes: nothing to walk
    if (object.name()->str() == "kvstash.wire.Envelope") plan.root = int(o);
    for (const reflection::Field* field : *object.fields()) {
      const reflection::Type& type = *field->type();
      FieldPlan f;
      f.name = field->name()->str();
      f.offset = field->offset();
      f.rules = ReadRules(*field);
      switch (type.base_type()) {
        case reflection::String: f.kind = Kind::kString; break;
        case reflection::Obj:
          f.object = type.index();
          f.kind = objects.Get(uint32_t(type.index()))->is_struct() ? Kind::kStruct : Kind::kTable;
          break;
        case reflection::Union: {
          f.kind = Kind::kUnion;
          f.type_offset = uint16_t(field->offset() - sizeof(flatbuffers::voffset_t));
          const reflection::Enum& members = *schema->enums()->Get(uint32_t(type.index()));
          f.members.resize(256);
          for (const reflection::EnumVal* value : *members.values()) {
            if (value->value() == 0 || value->value() > 255) continue;  // NONE
            UnionMember& member = f.members[size_t(value->value())];
            member.object = value->union_type() ? value->union_type()->index() : -1;
            member.name = value->name()->str();
          }
          break;
        }
        case reflection::Vector:
          if (type.element() == reflection::String) {
            f.kind = Kind::kStringVector;
          } else if (type.element() == reflection::Obj &&
                     !objects.Get(uint32_t(type.index()))->is_struct()) {
            f.kind = Kind::kTableVector;
            f.object = type.index();
          } else {
            f.kind = Kind::kScalarVector;  // vectors of unions: not in our schema
          }
          break;
        default: continue;  // scalars, union type fields: the Verifier's business
      }
      if (f.kind == Kind::kStruct && !f.rules.required) continue;
      out.fields.push_back(std::move(f));
    }
  }
  return plan;
}

const Plan& MessagePlan() {
  // Built once from constant data and never changed: not mutable state.
  static const Plan plan = BuildPlan();
  return plan;
}

std::string Index(size_t i) { return "[" + std::to_string(i) + "]"; }

// Adds the enclosing path to a problem found below.
Status Under(const std::string& where, const Status& problem) {
  const std::string& message = problem.message();
  const bool path_follows =
      !message.empty() && (message[0] == '.' || message[0] == '[' || message[0] == '<');
  return Status(problem.code(), where + (path_follows ? "" : ": ") + message);
}

Status CheckString(const flatbuffers::String& s, const Rules& rules) {
  if (rules.non_empty && s.size() == 0) return Status::InvalidArgument("must not be empty");
  if (rules.max_bytes != 0 && s.size() > rules.max_bytes) {
    return Status::InvalidArgument(std::to_string(s.size()) + " bytes exceed the limit of " +
                                   std::to_string(rules.max_bytes));
  }
  size_t bad = 0;
  if (!IsCleanUtf8(s.string_view(), &bad)) {
    return Status::InvalidArgument("is not valid UTF-8 text (byte " + std::to_string(bad) + " of " +
                                   std::to_string(s.size()) + ")");
  }
  return Status::Ok();
}

Status CheckLength(size_t size, const Rules& rules) {
  if (rules.non_empty && size == 0) return Status::InvalidArgument("must not be empty");
  if (rules.exact_len != 0 && size != rules.exact_len) {
    return Status::InvalidArgument("holds " + std::to_string(size) + " elements; it must hold " +
                                   std::to_string(rules.exact_len));
  }
  return Status::Ok();
}

Status WalkTable(const Plan& plan, const ObjectPlan& object, const flatbuffers::Table& table);

Status WalkField(const Plan& plan, const FieldPlan& f, const flatbuffers::Table& table) {
  if (f.kind == Kind::kUnion) {
    const uint8_t type = table.GetField<uint8_t>(f.type_offset, 0);
    const auto* member_table = table.GetPointer<const flatbuffers::Table*>(f.offset);
    if (type == 0) {
      if (f.rules.required) return Status::InvalidArgument("is missing");
      return Status::Ok();
    }
    const UnionMember& member = f.members[type];
    if (member.object < 0) {
      return Status::Malformed("names union member " + std::to_string(type) +
                               ", which does not exist");
    }
    if (member_table == nullptr) {
      return Status::Malformed("names " + member.name + " but carries no table");
    }
    const Status s = WalkTable(plan, plan.objects[size_t(member.object)], *member_table);
    return s.ok() ? s : Under("<" + member.name + ">", s);
  }
  // Structs are inline; everything else is an offset the Verifier checked.
  if (!table.CheckField(f.offset)) {
    return f.rules.required ? Status::InvalidArgument("is missing") : Status::Ok();
  }
  switch (f.kind) {
    case Kind::kStruct: return Status::Ok();  // present
    case Kind::kString:
      return CheckString(*table.GetPointer<const flatbuffers::String*>(f.offset), f.rules);
    case Kind::kTable:
      return WalkTable(plan, plan.objects[size_t(f.object)],
                       *table.GetPointer<const flatbuffers::Table*>(f.offset));
    case Kind::kScalarVector:
      return CheckLength(table.GetPointer<const flatbuffers::Vector<uint8_t>*>(f.offset)->size(),
                         f.rules);
    case Kind::kStringVector: {
      const auto& v =
          *table.GetPointer<const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>*>(
              f.offset);
      KVSTASH_RETURN_IF_ERROR(CheckLength(v.size(), f.rules));
      Rules each = f.rules;
      each.non_empty = false;
      for (uint32_t i = 0; i < v.size(); ++i) {
        const Status s = CheckString(*v.Get(i), each);
        if (!s.ok()) return Under(Index(i), s);
      }
      return Status::Ok();
    }
    case Kind::kTableVector: {
      const auto& v =
          *table.GetPointer<const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::Table>>*>(
              f.offset);
      KVSTASH_RETURN_IF_ERROR(CheckLength(v.size(), f.rules));
      const ObjectPlan& element = plan.objects[size_t(f.object)];
      if (element.fields.empty()) return Status::Ok();
      for (uint32_t i = 0; i < v.size(); ++i) {
        const Status s = WalkTable(plan, element, *v.Get(i));
        if (!s.ok()) return Under(Index(i), s);
      }
      return Status::Ok();
    }
    case Kind::kUnion: break;
  }
  return Status::Ok();
}

Status WalkTable(const Plan& plan, const ObjectPlan& object, const flatbuffers::Table& table) {
  for (const FieldPlan& f : object.fields) {
    const Status s = WalkField(plan, f, table);
    if (!s.ok()) return Under("." + f.name, s);
  }
  return Status::Ok();
}

}  // namespace

Status CheckMessageRules(const wire::Envelope& envelope) {
  const Plan& plan = MessagePlan();
  const Status s = WalkTable(plan, plan.objects[size_t(plan.root)],
                             reinterpret_cast<const flatbuffers::Table&>(envelope));
  if (s.ok()) return s;
  // ".body<RegisterKVRequest>.allocations[0]..." reads better as
  // "RegisterKVRequest.allocations[0]...".
  std::string message = s.message();
  if (message.rfind(".body<", 0) == 0) {
    const size_t close = message.find('>');
    message = message.substr(6, close - 6) + message.substr(close + 1);
  } else if (!message.empty() && message[0] == '.') {
    message = "Envelope" + message;
  }
  return Status(s.code(), message);
}

bool IsCleanUtf8(std::string_view text, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c >= 0x01 && c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t min = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, min = 0x80, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, min = 0x800, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, min = 0x10000, cp = c & 0x07;
    } else {  // NUL, a continuation byte, 0xC0/0xC1 (overlong), 0xF5+
      *bad_offset = i;
      return false;
    }
    if (i + len > n) {
      *bad_offset = i;
      return false;
    }
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) {
        *bad_offset = i;
        return false;
      }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

std::string DescribeFieldRules(const std::string& table, const std::string& field) {
  for (const ObjectPlan& object : MessagePlan().objects) {
    if (object.name != table) continue;
    for (const FieldPlan& f : object.fields) {
      if (f.name != field) continue;
      std::string text;
      auto add = [&text](const std::string& part) { text += (text.empty() ? "" : " ") + part; };
      if (f.rules.max_bytes) add("max_bytes=" + std::to_string(f.rules.max_bytes));
      if (f.rules.exact_len) add("len=" + std::to_string(f.rules.exact_len));
      if (f.rules.non_empty) {
        add("non_empty");
      } else if (f.rules.required) {
        add("required");
      }
      return text;
    }
  }
  return "";
}

}  // namespace kvstash::proto::internal
