package httpapi

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

// This file holds the page's forms for the lists, the channels and the
// operator accounts. A form is read into the API's wire types (api.List,
// api.Channel, api.PutUser) and handed to the operation the API calls.

// adminPageRoutes registers the admin forms. The views GET /lists,
// /channels and /tokens and the token forms are registered in routes.
func (s *Server) adminPageRoutes() {
	s.pageRoute("GET /lists/new", ports.RoleAdmin, s.pageListForm)
	s.pageRoute("GET /lists/{name}/edit", ports.RoleAdmin, s.pageListForm)
	s.pageRoute("POST /lists", ports.RoleAdmin, s.pagePutList)
	s.pageRoute("POST /lists/{name}/delete", ports.RoleAdmin, s.pageDeleteList)
	s.pageRoute("GET /channels/{type}/edit", ports.RoleAdmin, s.pageChannelForm)
	s.pageRoute("POST /channels/{type}", ports.RoleAdmin, s.pagePutChannel)
	s.pageRoute("POST /channels/{type}/delete", ports.RoleAdmin, s.pageDeleteChannel)
	s.pageRoute("GET /users", ports.RoleAdmin, s.pageUsers)
	s.pageRoute("POST /users", ports.RoleAdmin, s.pagePutUser)
	s.pageRoute("POST /users/{name}/delete", ports.RoleAdmin, s.pageDeleteUser)
}

// adminConfirm asks to confirm a deletion: the form posts Fields and
// confirm=yes to Action.
type adminConfirm struct {
	base
	Heading, Message, Button, Action, Return string
	Fields                                   []field
}

// confirmAdmin renders the confirmation c.
func (s *Server) confirmAdmin(w http.ResponseWriter, r *http.Request, p ports.Principal, c adminConfirm) {
	c.base = s.newBase(w, r, p, c.Heading, strings.TrimPrefix(c.Return, "/"))
	s.render(w, r, http.StatusOK, "adminconfirm", c)
}

// confirmed reports whether the posted form confirms its deletion.
func confirmed(r *http.Request) bool { return r.PostForm.Get("confirm") == "yes" }

// formLines splits a textarea into its trimmed, non-blank lines.
func formLines(v string) []string {
	var out []string
	for l := range strings.Lines(v) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// --- Lists ---

func (s *Server) pageLists(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	ls, err := s.lists(r.Context(), p)
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	s.render(w, r, http.StatusOK, "lists", struct {
		base
		Lists []ports.List
	}{s.newBase(w, r, p, "Lists", "lists"), ls})
}

// listForm is the form of a list: a new one, or one being edited (its name
// fixed).
type listForm struct {
	base
	New                 bool
	Name, Type, Targets string
	// Types are the channel types in use, offered for the type.
	Types []string
}

// pageListForm shows the form of a new list (/lists/new) or of the list
// named in the path.
func (s *Server) pageListForm(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	v := listForm{New: r.PathValue("name") == ""}
	if !v.New {
		l, err := s.cfg.Directory.List(r.Context(), r.PathValue("name"))
		if err != nil {
			s.pageError(w, r, p, err)
			return
		}
		v.Name, v.Type, v.Targets = l.Name, l.Type, strings.Join(l.Targets, "\n")
	}
	s.renderListForm(w, r, p, http.StatusOK, v)
}

func (s *Server) renderListForm(w http.ResponseWriter, r *http.Request, p ports.Principal, status int, v listForm) {
	title := "New list"
	if !v.New {
		title = "List " + v.Name
	}
	err := v.Error
	v.base = s.newBase(w, r, p, title, "lists")
	v.Error = err
	if ts, err := s.channelTypes(r.Context(), p); err == nil {
		for _, t := range ts {
			v.Types = append(v.Types, t.Type)
		}
	}
	s.render(w, r, status, "listform", v)
}

// pagePutList creates (new=1: refused if the name is taken) or replaces a
// list from its form.
func (s *Server) pagePutList(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !s.readAdminForm(w, r, p) {
		return
	}
	f := r.PostForm
	v := listForm{New: f.Get("new") == "1", Name: strings.TrimSpace(f.Get("name")), Type: strings.TrimSpace(f.Get("type")),
		Targets: f.Get("targets")}
	in := api.List{Name: v.Name, Type: v.Type, Targets: formLines(v.Targets)}
	var err error
	if v.New {
		if _, lerr := s.cfg.Directory.List(r.Context(), v.Name); lerr == nil {
			err = fmt.Errorf("a list named %q exists already: edit it from the lists instead: %w", v.Name, ports.ErrConflict)
		} else if !errors.Is(lerr, ports.ErrNotFound) {
			err = lerr
		}
	}
	if err == nil {
		_, err = s.putList(r.Context(), p, v.Name, in)
	}
	if err != nil {
		code, msg := s.classify(r, err)
		v.Error = msg
		s.renderListForm(w, r, p, statusOf[code], v)
		return
	}
	s.setFlash(w, "List "+v.Name+" saved.")
	http.Redirect(w, r, "/lists", http.StatusSeeOther)
}

func (s *Server) pageDeleteList(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !s.readAdminForm(w, r, p) {
		return
	}
	name := r.PathValue("name")
	if !confirmed(r) {
		l, err := s.cfg.Directory.List(r.Context(), name)
		if err != nil {
			s.pageError(w, r, p, err)
			return
		}
		s.confirmAdmin(w, r, p, adminConfirm{Heading: "Delete list " + name,
			Message: fmt.Sprintf("List %s (%s, %s) is deleted: notifications sent to it from now on are refused. Those already accepted are not delivered to it either; they park.",
				name, l.Type, human.Count(int64(len(l.Targets)), "target")),
			Button: "Delete list " + name, Action: "/lists/" + url.PathEscape(name) + "/delete", Return: "/lists"})
		return
	}
	if err := s.deleteList(r.Context(), p, name); err != nil {
		s.pageError(w, r, p, err)
		return
	}
	s.setFlash(w, "List "+name+" deleted.")
	http.Redirect(w, r, "/lists", http.StatusSeeOther)
}

// --- Channels ---

func (s *Server) pageChannels(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	ts, err := s.channelTypes(r.Context(), p)
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	s.render(w, r, http.StatusOK, "channels", struct {
		base
		Types        []channelType
		ShowSettings bool
		Plugins      bool
	}{s.newBase(w, r, p, "Channels", "channels"), ts, p.Role.Allows(ports.RoleAdmin), s.cfg.Plugins != nil})
}

// settingInput is one input of the channel form.
type settingInput struct {
	ChannelSetting
	// Value is the value shown: as stored (a URL's credentials masked),
	// as posted after an error, never a secret's literal value.
	Value string
	// Input is how the value is asked for: text, number, duration,
	// select (Allowed, and bool), list (a textarea, one value a line) or
	// secret (a reference).
	Input string
	// Options are the select's values, after its "default" one.
	Options []string
}

// channelForm is the form of one channel type's settings.
type channelForm struct {
	base
	Type string
	// Exists says the type has a settings row (else it delivers with the
	// defaults).
	Exists bool
	// Inputs are the schema's settings; without a schema, Free holds the
	// settings as key=value lines.
	Inputs []settingInput
	Schema bool
	Free   string
	// Plugin says a loaded plugin delivers the type.
	Plugin                                           bool
	Backoff, MaxRetries, Interval, MaxInterval, Rate string
	Backoffs                                         []ports.Backoff
}

// newChannelForm is the form of c's settings for typ's schema.
func (s *Server) newChannelForm(typ string, c ports.ChannelSettings) channelForm {
	v := channelForm{Type: typ, Backoffs: []ports.Backoff{ports.BackoffFixed, ports.BackoffExponential},
		Backoff: string(c.Retry.Backoff)}
	if c.Retry.MaxRetries != 0 {
		v.MaxRetries = strconv.Itoa(c.Retry.MaxRetries)
	}
	if c.Retry.Interval != 0 {
		v.Interval = c.Retry.Interval.String()
	}
	if c.Retry.MaxInterval != 0 {
		v.MaxInterval = c.Retry.MaxInterval.String()
	}
	if c.RateLimit != 0 {
		v.Rate = strconv.FormatFloat(c.RateLimit, 'f', -1, 64)
	}
	if s.cfg.ChannelSchema != nil {
		_, v.Plugin = s.cfg.ChannelSchema(typ)
	}
	schema, ok := s.channelSchema(typ)
	v.Schema = ok
	if !ok {
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(c.Settings)) {
			fmt.Fprintf(&b, "%s=%s\n", k, c.Settings[k])
		}
		v.Free = b.String()
		return v
	}
	for _, st := range schema {
		in := settingInput{ChannelSetting: st, Value: c.Settings[st.Name], Input: "text"}
		switch {
		case st.Secret:
			in.Input = "secret"
		case len(st.Allowed) > 0:
			in.Input, in.Options = "select", st.Allowed
		case st.Kind == "bool":
			in.Input, in.Options = "select", []string{"true", "false"}
		case st.Kind == "number" || st.Kind == "duration":
			in.Input = st.Kind
		case st.Kind == "list":
			in.Input = "list"
			var vs []string
			for x := range strings.SplitSeq(in.Value, ",") {
				if x = strings.TrimSpace(x); x != "" {
					vs = append(vs, x)
				}
			}
			in.Value = strings.Join(vs, "\n")
		}
		v.Inputs = append(v.Inputs, in)
	}
	return v
}

func (s *Server) pageChannelForm(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	typ := r.PathValue("type")
	c, err := s.channelSettings(r.Context(), p, typ)
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	v := s.newChannelForm(typ, c)
	_, err = s.cfg.Directory.ChannelSettings(r.Context(), typ)
	v.Exists = err == nil
	s.renderChannelForm(w, r, p, http.StatusOK, v)
}

func (s *Server) renderChannelForm(w http.ResponseWriter, r *http.Request, p ports.Principal, status int, v channelForm) {
	err := v.Error
	v.base = s.newBase(w, r, p, "Channel "+v.Type, "channels")
	v.Error = err
	s.render(w, r, status, "channelform", v)
}

// errLiteralSecret is the error of a secret setting given in clear.
const errLiteralSecret = "a secret setting takes a reference (env:NAME or file:/path), never the secret itself; the value given was not kept"

// channelFromForm reads the channel form into the API's wire form; v is
// the form to show again should the put fail, without any secret given
// in clear.
func (s *Server) channelFromForm(typ string, f url.Values) (in api.Channel, v channelForm, err error) {
	var errs []error
	in = api.Channel{Type: typ, Settings: map[string]string{}}
	v = s.newChannelForm(typ, ports.ChannelSettings{Type: typ})
	if v.Schema {
		for i := range v.Inputs {
			st := &v.Inputs[i]
			raw := f.Get("setting." + st.Name)
			val := strings.TrimSpace(raw)
			if st.Input == "list" {
				val = strings.Join(formLines(raw), ",")
			}
			st.Value = raw
			switch {
			case val == "":
			case st.Secret && !ports.IsSecretRef(val):
				st.Value = ""
				errs = append(errs, &ports.FieldError{Field: "settings." + st.Name, Msg: errLiteralSecret})
			default:
				in.Settings[st.Name] = val
			}
		}
	} else {
		var kept []string
		for i, line := range formLines(f.Get("settings")) {
			k, val, ok := strings.Cut(line, "=")
			k, val = strings.TrimSpace(k), strings.TrimSpace(val)
			switch {
			case !ok || k == "":
				errs = append(errs, fmt.Errorf("settings: line %d is not key=value", i+1))
				continue
			case ports.IsSecretKey(k) && val != "" && !ports.IsSecretRef(val):
				errs = append(errs, &ports.FieldError{Field: "settings." + k, Msg: errLiteralSecret})
				continue
			}
			in.Settings[k] = val
			kept = append(kept, line)
		}
		v.Free = strings.Join(kept, "\n")
	}
	v.Backoff, v.MaxRetries, v.Interval, v.MaxInterval, v.Rate = f.Get("backoff"), f.Get("max_retries"),
		f.Get("interval"), f.Get("max_interval"), f.Get("rate_limit")
	in.Retry.Backoff = ports.Backoff(strings.TrimSpace(v.Backoff))
	if x := strings.TrimSpace(v.MaxRetries); x != "" {
		n, perr := strconv.Atoi(x)
		if perr != nil {
			errs = append(errs, fmt.Errorf("retry.max_retries: %q is not a whole number", human.Clip(x, 20)))
		}
		in.Retry.MaxRetries = n
	}
	for _, d := range []struct {
		field, v string
		to       *float64
	}{{"retry.interval", v.Interval, &in.Retry.IntervalSeconds}, {"retry.max_interval", v.MaxInterval, &in.Retry.MaxIntervalSeconds}} {
		if x := strings.TrimSpace(d.v); x != "" {
			dur, perr := time.ParseDuration(x)
			if perr != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not a duration such as 30s or 5m", d.field, human.Clip(x, 20)))
			}
			*d.to = dur.Seconds()
		}
	}
	if x := strings.TrimSpace(v.Rate); x != "" {
		rate, perr := strconv.ParseFloat(x, 64)
		if perr != nil {
			errs = append(errs, fmt.Errorf("rate_limit: %q is not a number", human.Clip(x, 20)))
		}
		in.RateLimit = rate
	}
	if err := errors.Join(errs...); err != nil {
		return in, v, fmt.Errorf("%w: %w", err, ports.ErrInvalid)
	}
	return in, v, nil
}

func (s *Server) pagePutChannel(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !s.readAdminForm(w, r, p) {
		return
	}
	typ := r.PathValue("type")
	in, v, err := s.channelFromForm(typ, r.PostForm)
	if err == nil {
		_, err = s.putChannel(r.Context(), p, typ, in)
	}
	if err != nil {
		_, gerr := s.cfg.Directory.ChannelSettings(r.Context(), typ)
		v.Exists = gerr == nil
		code, msg := s.classify(r, err)
		v.Error = msg
		s.renderChannelForm(w, r, p, statusOf[code], v)
		return
	}
	s.setFlash(w, "Channel "+typ+" saved.")
	http.Redirect(w, r, "/channels", http.StatusSeeOther)
}

func (s *Server) pageDeleteChannel(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !s.readAdminForm(w, r, p) {
		return
	}
	typ := r.PathValue("type")
	if !confirmed(r) {
		if _, err := s.cfg.Directory.ChannelSettings(r.Context(), typ); err != nil {
			s.pageError(w, r, p, err)
			return
		}
		s.confirmAdmin(w, r, p, adminConfirm{Heading: "Delete the settings of " + typ,
			Message: fmt.Sprintf("The settings of channel %s are deleted: its deliveries go on with the plugin's defaults, the default retry policy and no rate limit. A setting the plugin requires is then missing, and its deliveries park.", typ),
			Button:  "Delete the settings of " + typ, Action: "/channels/" + url.PathEscape(typ) + "/delete", Return: "/channels"})
		return
	}
	if err := s.deleteChannel(r.Context(), p, typ); err != nil {
		s.pageError(w, r, p, err)
		return
	}
	s.setFlash(w, "The settings of channel "+typ+" deleted: it delivers with the defaults.")
	http.Redirect(w, r, "/channels", http.StatusSeeOther)
}

// --- Users ---

type usersPage struct {
	base
	Users []ports.User
	Roles []ports.OperatorRole
	// NewName and NewRole are the new user form's, kept after an error
	// (never the password).
	NewName string
	NewRole ports.OperatorRole
}

func (s *Server) pageUsers(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	s.renderUsers(w, r, p, http.StatusOK, usersPage{NewRole: ports.RoleViewer})
}

func (s *Server) renderUsers(w http.ResponseWriter, r *http.Request, p ports.Principal, status int, v usersPage) {
	us, err := s.cfg.Operators.Users(r.Context())
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	msg := v.Error
	v.base = s.newBase(w, r, p, "Users", "users")
	v.Error, v.Users, v.Roles = msg, us, ports.OperatorRoles
	s.render(w, r, status, "users", v)
}

// pagePutUser creates a user (new=1: refused if the name is taken) or
// changes one's role and, when given, password.
func (s *Server) pagePutUser(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !s.readAdminForm(w, r, p) {
		return
	}
	f := r.PostForm
	name := strings.TrimSpace(f.Get("name"))
	in := api.PutUser{Role: ports.OperatorRole(f.Get("role")), Password: f.Get("password")}
	var err error
	if f.Get("new") == "1" {
		us, uerr := s.cfg.Operators.Users(r.Context())
		switch {
		case uerr != nil:
			err = uerr
		case slices.ContainsFunc(us, func(u ports.User) bool { return u.Name == name }):
			err = fmt.Errorf("a user named %q exists already: change it in the table instead: %w", name, ports.ErrConflict)
		case in.Password == "":
			err = fmt.Errorf("password: a new user needs one: %w", ports.ErrInvalid)
		}
	}
	if err == nil {
		_, err = s.putUser(r.Context(), p, name, in)
	}
	if err != nil {
		code, msg := s.classify(r, err)
		v := usersPage{NewRole: in.Role}
		if f.Get("new") == "1" {
			v.NewName = name
		}
		v.Error = msg
		s.renderUsers(w, r, p, statusOf[code], v)
		return
	}
	s.setFlash(w, "User "+name+" saved.")
	http.Redirect(w, r, "/users", http.StatusSeeOther)
}

func (s *Server) pageDeleteUser(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !s.readAdminForm(w, r, p) {
		return
	}
	name := r.PathValue("name")
	if !confirmed(r) {
		s.confirmAdmin(w, r, p, adminConfirm{Heading: "Delete user " + name,
			Message: fmt.Sprintf("User %s is deleted with its sessions and the tokens made by its logins (outbox login): they stop working at once.", name),
			Button:  "Delete user " + name, Action: "/users/" + url.PathEscape(name) + "/delete", Return: "/users"})
		return
	}
	if err := s.deleteUser(r.Context(), p, name); err != nil {
		code, msg := s.classify(r, err)
		s.renderUsers(w, r, p, statusOf[code], usersPage{NewRole: ports.RoleViewer, base: base{Error: msg}})
		return
	}
	s.setFlash(w, "User "+name+" deleted.")
	http.Redirect(w, r, "/users", http.StatusSeeOther)
}
