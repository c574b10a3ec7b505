// Prints, as hex, the protobuf bytes of the Binding, the Event and the error Status that
// scorer/kube/src/api.rs's test builds, encoded by Kubernetes 1.20.2's own serializer: the
// golden bytes that test reads with Loadstar's field numbers (GO_BINDING, GO_EVENT,
// GO_STATUS).
//
// Run it inside the Kubernetes source that tests/e2e/install-deps.sh unpacks (GOPATH mode,
// its vendored packages):
//
//	K=~/.cache/loadstar/gopath/src/k8s.io/kubernetes
//	mkdir -p $K/cmd/pbgold && cp tests/e2e/pbgold/main.go $K/cmd/pbgold/
//	cd $K && GOPATH=~/.cache/loadstar/gopath GO111MODULE=off go run ./cmd/pbgold
package main

import (
	"bytes"
	"encoding/hex"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

func enc(s *protobuf.Serializer, o runtime.Object) string {
	var b bytes.Buffer
	if err := s.Encode(o, &b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b.Bytes())
}

func main() {
	s := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	b := &v1.Binding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Target:     v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "n1"},
	}
	fmt.Println("binding", enc(s, b))
	ts := metav1.Unix(1700000000, 0)
	e := &v1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{GenerateName: "p.", Namespace: "ns"},
		InvolvedObject:      v1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p", UID: "u1"},
		Reason:              "FailedScheduling",
		Message:             "0/3 nodes are available: 3 Insufficient cpu.",
		Type:                "Warning",
		Source:              v1.EventSource{Component: "loadstar"},
		ReportingController: "loadstar",
		ReportingInstance:   "i1",
		FirstTimestamp:      ts,
		LastTimestamp:       ts,
		Count:               1,
	}
	fmt.Println("event", enc(s, e))
	st := &metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  `Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"`,
		Reason:   metav1.StatusReasonConflict,
		Code:     409,
	}
	fmt.Println("status", enc(s, st))
}
